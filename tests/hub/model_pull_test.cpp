// Which files a pull's selector picks among a repository's: a file by name,
// a quantization bounded by separators (Q4_K_M, not IQ4_K_M), the Q4_K_M
// default, every part of a split GGUF (a missing one named), and a clear
// error when none or several match.

#include "hub/model_pull.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

using Names = std::vector<std::string>;

Names picked(const Names& names, const std::string& selector) {
  auto files = select_files(names, selector);
  EXPECT_TRUE(files.ok()) << files.message();
  return files.ok() ? files.value() : Names{};
}

TEST(SelectFiles, ByNameQuantizationAndDefault) {
  const Names repo = {"README.md", "m-IQ4_K_M.gguf", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "config.json"};
  EXPECT_EQ(picked(repo, ""), Names{"m-Q4_K_M.gguf"});
  EXPECT_EQ(picked(repo, "q8_0"), Names{"m-Q8_0.gguf"});
  EXPECT_EQ(picked(repo, "IQ4_K_M"), Names{"m-IQ4_K_M.gguf"});
  EXPECT_EQ(picked(repo, "config.json"), Names{"config.json"});
  EXPECT_EQ(picked({"only.gguf", "README.md"}, ""), Names{"only.gguf"});
}

TEST(SelectFiles, NoneOrSeveralAreErrorsListingTheFiles) {
  auto none = select_files({"m-Q8_0.gguf"}, "Q5_K_M");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("m-Q8_0.gguf"), std::string::npos) << none.message();
  auto several = select_files({"a.gguf", "b.gguf"}, "");
  ASSERT_FALSE(several.ok());
  EXPECT_NE(several.message().find("more than one"), std::string::npos) << several.message();
  EXPECT_FALSE(select_files({"a-Q8_0.gguf", "b-Q8_0.gguf"}, "Q8_0").ok());
}

TEST(SelectFiles, ASplitModelComesWithAllItsParts) {
  const Names repo = {"big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf", "small-Q8_0.gguf"};
  const Names parts = {"big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf"};
  EXPECT_EQ(picked(repo, ""), parts);
  EXPECT_EQ(picked(repo, "big-Q4_K_M-00001-of-00003.gguf"), parts);
  auto later = select_files(repo, "big-Q4_K_M-00002-of-00003.gguf");
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.message().find("first part"), std::string::npos) << later.message();
  auto missing = select_files({"big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf"}, "");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("big-Q4_K_M-00002-of-00003.gguf"), std::string::npos) << missing.message();
}

TEST(SelectFiles, AStarPicksACheckpointsFilesForConvert) {
  const Names repo = {"README.md", "config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                      "model.safetensors.index.json", "pytorch_model.bin", "original/consolidated.safetensors", "tokenizer.json",
                      "tokenizer_config.json", "model-Q4_K_M.gguf"};
  EXPECT_EQ(picked(repo, "*"), (Names{"config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}));
  auto none = select_files({"model-Q4_K_M.gguf"}, "*");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("config.json"), std::string::npos) << none.message();
}

}  // namespace
}  // namespace ds
