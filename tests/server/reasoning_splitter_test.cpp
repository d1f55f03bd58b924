#include "server/reasoning_splitter.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

// Feeds `text` in pieces of `piece` bytes; returns (reasoning, content).
std::pair<std::string, std::string> split(const std::string& text, size_t piece, bool in_reasoning) {
  ReasoningSplitter splitter(in_reasoning);
  std::string reasoning, content;
  for (size_t i = 0; i < text.size(); i += piece) {
    const ReasoningDelta d = splitter.push(text.substr(i, piece));
    reasoning += d.reasoning;
    content += d.content;
  }
  const ReasoningDelta rest = splitter.flush();
  return {reasoning + rest.reasoning, content + rest.content};
}

TEST(ReasoningSplitter, TagsSplitAcrossPiecesOfAnySize) {
  for (size_t piece : {1, 2, 3, 5, 7, 100}) {
    EXPECT_EQ(split("weigh options</think>\n\nThe answer is 4.", piece, true),
              std::make_pair(std::string("weigh options"), std::string("The answer is 4.")))
        << piece;
    EXPECT_EQ(split("<think>hmm</think>Yes.", piece, false), std::make_pair(std::string("hmm"), std::string("Yes."))) << piece;
    EXPECT_EQ(split("no tags at all, a < b and </thin", piece, false),
              std::make_pair(std::string(), std::string("no tags at all, a < b and </thin")))
        << piece;
    EXPECT_EQ(split("still thinking </thi", piece, true), std::make_pair(std::string("still thinking </thi"), std::string()))
        << piece;
  }
}

}  // namespace
}  // namespace ds
