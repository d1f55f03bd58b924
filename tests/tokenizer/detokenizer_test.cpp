#include "tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace ds {
namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

TEST(IncrementalDetokenizer, NeverEmitsABrokenSequence) {
  // stories260K has a 512-token SentencePiece vocabulary: non-ASCII text falls
  // back to byte tokens, so characters arrive split across tokens.
  auto file = GgufFile::open(std::string(DSINFER_FIXTURES) + "/models/stories260K.gguf");
  ASSERT_TRUE(file.ok()) << file.message();
  auto tokenizer = Tokenizer::from_gguf(*file.value());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.message();
  const std::string text = "Once 中文 🦙 café";
  const std::vector<int32_t> ids = tokenizer.value()->encode(text, false, false);
  IncrementalDetokenizer detokenizer(*tokenizer.value(), false, true);
  std::string streamed;
  int n_held_back = 0;
  for (int32_t id : ids) {
    const std::string delta = detokenizer.push(id);
    EXPECT_TRUE(valid_utf8(delta)) << "broken UTF-8 after token " << id;
    if (delta.empty()) ++n_held_back;
    streamed += delta;
  }
  streamed += detokenizer.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_GT(n_held_back, 0) << "the test text should split characters across tokens";
}

TEST(Utf8, SanitizeReplacesInvalidBytes) {
  EXPECT_EQ(sanitize_utf8("a\xff" "b"), "a\xef\xbf\xbd" "b");
  EXPECT_EQ(sanitize_utf8("\xe4\xb8"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(sanitize_utf8("ok 中"), "ok 中");
}

}  // namespace
}  // namespace ds
