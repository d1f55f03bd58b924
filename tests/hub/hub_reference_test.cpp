// How models are named on the hub: OWNER/NAME[:SELECTOR] and
// hf://OWNER/NAME[@REVISION]/FILE parsed, and what could escape the cache
// (.., absolute paths, bad characters) refused.

#include "hub/hub_reference.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

TEST(HubReference, RepositoryAndSelector) {
  auto plain = parse_hub_reference("unsloth/DeepSeek-R1-Distill-Qwen-1.5B-GGUF");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(plain.value().repo, "unsloth/DeepSeek-R1-Distill-Qwen-1.5B-GGUF");
  EXPECT_EQ(plain.value().selector, "");
  EXPECT_EQ(plain.value().revision, "main");
  auto quant = parse_hub_reference("owner/name:Q8_0");
  ASSERT_TRUE(quant.ok());
  EXPECT_EQ(quant.value().selector, "Q8_0");
  auto nested = parse_hub_reference("owner/name:sub/dir/model.gguf");
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested.value().selector, "sub/dir/model.gguf");
}

TEST(HubReference, HubUrls) {
  EXPECT_TRUE(is_hub_url("hf://a/b/c.gguf"));
  EXPECT_FALSE(is_hub_url("models/a.gguf"));
  auto url = parse_hub_url("hf://owner/name/dir/model-Q4_K_M.gguf");
  ASSERT_TRUE(url.ok()) << url.message();
  EXPECT_EQ(url.value().repo, "owner/name");
  EXPECT_EQ(url.value().selector, "dir/model-Q4_K_M.gguf");
  auto pinned = parse_hub_url("hf://owner/name@v1.0/model.gguf");
  ASSERT_TRUE(pinned.ok()) << pinned.message();
  EXPECT_EQ(pinned.value().repo, "owner/name");
  EXPECT_EQ(pinned.value().revision, "v1.0");
}

TEST(HubReference, RepositoryUrls) {
  auto repo = parse_hub_repository_url("hf://deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B@main/");
  ASSERT_TRUE(repo.ok()) << repo.message();
  EXPECT_EQ(repo.value().repo, "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B");
  EXPECT_EQ(repo.value().revision, "main");
  EXPECT_FALSE(parse_hub_repository_url("hf://owner/name/file.gguf").ok());
  EXPECT_FALSE(parse_hub_repository_url("hf://owner").ok());
}

TEST(HubReference, WhatCouldEscapeTheCacheIsRefused) {
  for (const char* bad : {"owner", "/name", "owner/", "own er/name", "../x/name", "owner/..", "a/b/c", "owner/name:../../etc/passwd",
                          "owner/name:/abs", "owner/name:a//b", "owner/name:dir/", "owner/name:a\\b"}) {
    EXPECT_FALSE(parse_hub_reference(bad).ok()) << bad;
  }
  for (const char* bad : {"hf://owner/name", "hf://owner/name/", "hf://owner/name/../x.gguf", "hf://owner/name@../x.gguf", "hf://../name/x.gguf"}) {
    EXPECT_FALSE(parse_hub_url(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ds
