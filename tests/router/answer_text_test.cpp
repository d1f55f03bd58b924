#include "router/answer_text.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

using Clock = AnswerReader::Clock;

TEST(AnswerReader, ReadsAWholeChatAnswerWithItsUsage) {
  AnswerReader r(false);
  const std::string body =
      R"({"choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"think ","content":"Hello"}},)"
      R"({"index":1,"message":{"content":null,"tool_calls":[{"function":{"name":"f","arguments":"{\"x\":1}"}}]}}],)"
      R"("usage":{"completion_tokens":7}})";
  r.add(body.substr(0, 10), Clock::now());  // pieces of a body are only joined
  r.add(body.substr(10), Clock::now());
  r.finish();
  EXPECT_EQ(r.text(), "think Hello\nf{\"x\":1}");
  EXPECT_EQ(r.output_tokens(), 7);
  EXPECT_FALSE(r.first_text_at());  // a whole answer's timing is the instance's (Server-Timing)
  EXPECT_EQ(r.error(), "");
}

TEST(AnswerReader, ReadsAStreamCutAnywhere) {
  const std::string stream =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" upon\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"text\":\"!\"}]}\n\n"
      "data: [DONE]\n\n";
  for (size_t cut = 1; cut < stream.size(); cut += 7) {
    AnswerReader r(true);
    const auto t0 = Clock::now();
    r.add(stream.substr(0, cut), t0);
    r.add(stream.substr(cut), t0 + std::chrono::milliseconds(5));
    r.finish();
    EXPECT_EQ(r.text(), "Once upon!") << cut;
    EXPECT_EQ(r.output_tokens(), 3) << cut;  // the role-only event carries no text
    ASSERT_TRUE(r.first_text_at());
  }
}

TEST(AnswerReader, StreamUsageAndErrorEventsAreRead) {
  AnswerReader r(true);
  r.add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"completion_tokens\":4}}\n\n"
        "data: {\"error\":{\"message\":\"the engine failed\"}}\n\ndata: [DONE]\n\n",
        Clock::now());
  EXPECT_EQ(r.output_tokens(), 4);
  EXPECT_EQ(r.error(), "the engine failed");
}

TEST(AnswerReader, TextIsBounded) {
  AnswerReader r(false);
  const std::string big(AnswerReader::k_max_text + 10, 'x');
  r.add("{\"choices\":[{\"text\":\"" + big + "\"}]}", Clock::now());
  r.finish();
  EXPECT_EQ(r.text().size(), AnswerReader::k_max_text);
  EXPECT_TRUE(r.truncated());
}

TEST(TokenOverlap, WordsAndPunctuation) {
  EXPECT_EQ(word_tokens("Hi, there!  x2"), (std::vector<std::string>{"Hi", ",", "there", "!", "x2"}));
  EXPECT_EQ(token_overlap("a b c", "a b c"), 1.0);
  EXPECT_EQ(token_overlap("", ""), 1.0);
  EXPECT_EQ(token_overlap("a", ""), 0.0);
  EXPECT_EQ(token_overlap("a b c d", "e f"), 0.0);
  EXPECT_DOUBLE_EQ(token_overlap("a b c d", "a b"), 2.0 * 2 / 6);  // F1: 2 common of 4 and 2
  EXPECT_DOUBLE_EQ(token_overlap("a a b", "a b b"), 2.0 * 2 / 6);  // multisets: one "a" and one "b" in common
}

}  // namespace
}  // namespace ds
