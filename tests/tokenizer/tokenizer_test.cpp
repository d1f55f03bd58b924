// Tokenizer parity with llama.cpp's own test vectors (../shared/fixtures/vocab).

#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

namespace ds {
namespace {

const std::string k_vocab_dir = std::string(DSINFER_FIXTURES) + "/vocab/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<Tokenizer> load(const std::string& name, std::unique_ptr<GgufFile>* file) {
  auto opened = GgufFile::open(k_vocab_dir + "ggml-vocab-" + name + ".gguf");
  EXPECT_TRUE(opened.ok()) << opened.message();
  if (!opened.ok()) return nullptr;
  *file = opened.take();
  auto tokenizer = Tokenizer::from_gguf(**file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.message();
  return tokenizer.ok() ? tokenizer.take() : nullptr;
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, MatchLlamaCppTestVectors) {
  std::unique_ptr<GgufFile> file;
  const std::unique_ptr<Tokenizer> tokenizer = load(GetParam(), &file);
  ASSERT_NE(tokenizer, nullptr);
  const std::string base = k_vocab_dir + "ggml-vocab-" + GetParam() + ".gguf";
  const std::string inputs = read_file(base + ".inp");
  std::istringstream outputs(read_file(base + ".out"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  size_t start = 0, n_checked = 0;
  for (size_t end = inputs.find(separator); end != std::string::npos; end = inputs.find(separator, start)) {
    const std::string text = inputs.substr(start, end - start);
    start = end + separator.size();
    std::string line;
    ASSERT_TRUE(std::getline(outputs, line)) << "fewer outputs than inputs";
    std::vector<int32_t> expected;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) expected.push_back(id);
    EXPECT_EQ(tokenizer->encode(text, false, false), expected) << GetParam() << " on '" << text << "'";
    ++n_checked;
  }
  EXPECT_GT(n_checked, 10u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VocabVectors,
                         ::testing::Values("deepseek-llm", "deepseek-coder", "gpt-2", "llama-spm"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

TEST(Tokenizer, SpecialTokensAreParsedOnlyWhenAsked) {
  std::unique_ptr<GgufFile> file;
  const std::unique_ptr<Tokenizer> tokenizer = load("deepseek-llm", &file);
  ASSERT_NE(tokenizer, nullptr);
  const std::string bos_text = tokenizer->vocab().tokens[size_t(tokenizer->vocab().bos)];
  const std::vector<int32_t> parsed = tokenizer->encode(bos_text + "Hello", false, true);
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed[0], tokenizer->vocab().bos);
  const std::vector<int32_t> literal = tokenizer->encode(bos_text + "Hello", false, false);
  EXPECT_NE(literal[0], tokenizer->vocab().bos);
  const std::vector<int32_t> with_bos = tokenizer->encode("Hello", true, false);
  EXPECT_EQ(with_bos[0], tokenizer->vocab().bos);
}

TEST(Tokenizer, DecodeGivesBackTheInput) {
  for (const char* name : {"deepseek-llm", "deepseek-coder", "gpt-2", "llama-spm"}) {
    std::unique_ptr<GgufFile> file;
    const std::unique_ptr<Tokenizer> tokenizer = load(name, &file);
    ASSERT_NE(tokenizer, nullptr);
    for (const std::string text : {"Hello world", "  leading spaces\n\nand\ttabs", "中文测试：你好，世界！",
                                   "emoji 🦙🚀 and ünïcödé", "int main() { return 0; }", "3.14159 1,000,000"}) {
      EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false, false), false), text) << name;
    }
  }
}

TEST(Tokenizer, InvalidUtf8DoesNotCrash) {
  std::unique_ptr<GgufFile> file;
  const std::unique_ptr<Tokenizer> tokenizer = load("gpt-2", &file);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_FALSE(tokenizer->encode(std::string("ab\xff\xfe\xc3", 5), false, false).empty());
}

TEST(Tokenizer, UnknownPreTokenizerIsAClearError) {
  auto pre = Pretokenizer::create("no-such-rules");
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.message().find("no-such-rules"), std::string::npos);
  EXPECT_NE(pre.message().find("deepseek-llm"), std::string::npos);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

// The server tokenizes on several prepare threads at once (run under TSan in CI).
TEST(Tokenizer, EncodesOnManyThreadsAtOnce) {
  std::unique_ptr<GgufFile> file;
  const std::unique_ptr<Tokenizer> tokenizer = load("deepseek-llm", &file);
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "Hello, world! 你好 123 it's   spaced\n\ttabs <|im_start|>";
  const std::vector<int32_t> expected = tokenizer->encode(text, true, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) mismatches += tokenizer->encode(text, true, true) != expected;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace ds
