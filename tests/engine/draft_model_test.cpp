// The draft model's own cache: what it proposes after its earlier drafts were
// rejected (the cache rolled back to the agreed tokens and the rest
// recomputed) equals what a fresh drafter proposes for the same tokens, and
// a sequence drafts the same alone or beside others; unconfident tokens end a
// draft.

#include "engine/draft_model.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ds {
namespace {

const std::string k_stories = std::string(DSINFER_FIXTURES) + "/models/stories260K.gguf";

std::unique_ptr<DraftModel> drafter(int64_t n_pages, float min_probability = 0.0f) {
  auto model = Model::load(k_stories, ModelOptions{2, LoadMode::mmap});
  EXPECT_TRUE(model.ok()) << model.message();
  auto d = DraftModel::create(model.take(), KvCacheOptions{DType::f16, 16, n_pages}, min_probability);
  EXPECT_TRUE(d.ok()) << d.message();
  return d.take();
}

std::vector<int32_t> propose(DraftModel& d, int64_t id, const std::vector<int32_t>& tokens, int32_t n) {
  std::vector<int32_t> draft;
  const Status status = d.propose({DraftRequest{id, &tokens, n, &draft}});
  EXPECT_TRUE(status.ok()) << status.message();
  return draft;
}

TEST(DraftModel, ProposalsAfterARejectionEqualAFreshDrafters) {
  auto d = drafter(64);
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 30, 85, 90, 272};
  const std::vector<int32_t> first = propose(*d, 7, tokens, 5);
  ASSERT_EQ(first.size(), 5u);
  // The target kept two draft tokens, then sampled another than the third.
  tokens.insert(tokens.end(), first.begin(), first.begin() + 2);
  tokens.push_back(first[2] == 5 ? 6 : 5);
  const std::vector<int32_t> after = propose(*d, 7, tokens, 5);
  EXPECT_EQ(after, propose(*drafter(64), 7, tokens, 5));
  // Tokens that part from the cached ones well before their end (the cache must not trust its longer prefix).
  for (size_t i = 2; i < tokens.size(); ++i) tokens[i] = int32_t(100 + 13 * i);
  tokens.push_back(11);
  EXPECT_EQ(propose(*d, 7, tokens, 5), propose(*drafter(64), 7, tokens, 5));
  // A longer prompt than one catch-up chunk, then the same sequence again unchanged.
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 700; ++i) long_prompt.push_back(3 + (i * 37) % 500);
  const std::vector<int32_t> long_draft = propose(*d, 8, long_prompt, 3);
  EXPECT_EQ(long_draft, propose(*drafter(64), 8, long_prompt, 3));
  EXPECT_EQ(propose(*d, 8, long_prompt, 3), long_draft);
}

// A minimum probability cuts the greedy draft short, never changes it.
TEST(DraftModel, UnconfidentTokensEndTheDraft) {
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 30, 85, 90, 272};
  const std::vector<int32_t> full = propose(*drafter(64), 1, tokens, 8);
  ASSERT_EQ(full.size(), 8u);
  const std::vector<int32_t> confident = propose(*drafter(64, 0.5f), 1, tokens, 8);
  EXPECT_LE(confident.size(), full.size());
  EXPECT_TRUE(std::equal(confident.begin(), confident.end(), full.begin()));
  EXPECT_TRUE(propose(*drafter(64, 1.0f), 1, tokens, 8).empty());  // no token of a 512-word softmax has all of it
}

TEST(DraftModel, SequencesDraftAloneAsBesideOthersAndTheirPagesComeBack) {
  auto together = drafter(64);
  const std::vector<int32_t> a = {1, 403, 407, 261}, b = {1, 52, 100, 7, 402, 9, 44};
  std::vector<int32_t> draft_a, draft_b;
  ASSERT_TRUE(together->propose({DraftRequest{1, &a, 4, &draft_a}, DraftRequest{2, &b, 2, &draft_b}}).ok());
  EXPECT_EQ(draft_a.size(), 4u);
  EXPECT_EQ(draft_b.size(), 2u);
  EXPECT_EQ(draft_a, propose(*drafter(64), 1, a, 4));
  EXPECT_EQ(draft_b, propose(*drafter(64), 2, b, 2));
  EXPECT_LT(together->free_pages(), 64);
  together->forget(1);
  together->forget(2);
  EXPECT_EQ(together->free_pages(), 64);
  // No room: one page of 16 positions cannot hold 20 tokens and their draft.
  auto small = drafter(1);
  EXPECT_TRUE(propose(*small, 3, std::vector<int32_t>(20, 5), 2).empty());
}

}  // namespace
}  // namespace ds
