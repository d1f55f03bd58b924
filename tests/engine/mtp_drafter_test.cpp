// The multi-token-prediction drafter's proposals are its layer's greedy chain
// over the sequence as it stands: the first draft token from the rows of
// every position with the target's hidden states, each next one from a
// provisional row of the token before it with the layer's own output. That
// holds after the target rejected part of a draft (the provisional rows are
// written again), for sequences drafting together, for a sequence recomputed
// from its start (preemption), and for one whose first page another sequence
// wrote (a prefix-cache hit). The expected chain is built here from the
// models' forwards alone, in a cache of its own.

#include "engine/mtp_drafter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "support/random_model.h"

namespace ds {
namespace {

constexpr int32_t k_page = 16;

class MtpDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RandomModelShape shape;
    shape.arch = "deepseek32";
    shape.n_embd = 128;
    shape.n_vocab = 512;
    shape.n_layer = 2;
    shape.nextn = true;
    options_.nextn_rows = true;
    auto model = Model::load(write_random_model(shape, "mtp_drafter.gguf"), options_);
    ASSERT_TRUE(model.ok()) << model.message();
    model_ = model.take();
    auto cache = KvCache::create(model_->backend(), model_->config(), KvCacheOptions{DType::f32, k_page, 64});
    ASSERT_TRUE(cache.ok()) << cache.message();
    cache_ = cache.take();
    auto drafter = MtpDrafter::create(*model_, *cache_, options_, 0.0f);
    ASSERT_TRUE(drafter.ok()) << drafter.message();
    drafter_ = drafter.take();
  }

  // Pages [first, first + n) of the cache as a block table.
  static std::vector<int32_t> pages(int32_t first, int32_t n) {
    std::vector<int32_t> table(static_cast<size_t>(n));
    std::iota(table.begin(), table.end(), first);
    return table;
  }

  // The target's forward over tokens [first, first + n) (an engine step), its hidden states handed to the drafter.
  void target_step(int64_t id, const std::vector<int32_t>& tokens, int32_t first, int32_t n, const std::vector<int32_t>& table) {
    ModelRunner runner(*model_, *cache_);
    runner.begin();
    runner.add(tokens.data() + first, first, n, {table.data(), int32_t(table.size())});
    for (int32_t i = 0; i < n; ++i) runner.want_hidden(i);
    ASSERT_TRUE(runner.run().ok());
    drafter_->take_hidden(id, first, runner.hidden(0), n);
  }

  std::vector<int32_t> propose(int64_t id, const std::vector<int32_t>& tokens, int32_t n, const std::vector<int32_t>& table) {
    std::vector<int32_t> draft;
    const Status status = drafter_->propose({MtpSequence{id, &tokens, {table.data(), int32_t(table.size())}, n, &draft}});
    EXPECT_TRUE(status.ok()) << status.message();
    return draft;
  }

  // The layer's greedy chain of n tokens after `tokens`, from scratch.
  std::vector<int32_t> expected_draft(const std::vector<int32_t>& tokens, int32_t n) {
    auto cache = KvCache::create(model_->backend(), model_->config(), KvCacheOptions{DType::f32, k_page, 64});
    EXPECT_TRUE(cache.ok());
    auto nextn = Model::load_nextn(options_, *model_);
    EXPECT_TRUE(nextn.ok()) << nextn.message();
    const std::vector<int32_t> table = pages(0, 64);
    const BlockTableView view{table.data(), int32_t(table.size())};
    const int32_t length = int32_t(tokens.size());
    const int64_t n_embd = model_->config().n_embd, n_vocab = model_->config().n_vocab;
    ModelRunner target(*model_, *cache.value()), layer(*nextn.value(), *cache.value());
    target.begin();
    target.add(tokens.data(), 0, length - 1, view);
    for (int32_t i = 0; i + 1 < length; ++i) target.want_hidden(i);
    EXPECT_TRUE(target.run().ok());
    // Rows 0 .. length - 2: token p + 1 with the target's hidden state at p.
    layer.begin();
    layer.add(tokens.data() + 1, 0, length - 1, view);
    layer.add_previous_hidden(target.hidden(0), length - 1);
    layer.want_logits(length - 2);
    layer.want_hidden(length - 2);
    EXPECT_TRUE(layer.run().ok());
    std::vector<int32_t> draft;
    for (int32_t j = 0;; ++j) {
      const float* logits = layer.logits(0);
      draft.push_back(int32_t(std::max_element(logits, logits + n_vocab) - logits));
      if (int32_t(draft.size()) == n) return draft;
      const std::vector<float> hidden(layer.hidden(0), layer.hidden(0) + n_embd);
      layer.begin();
      layer.add(&draft.back(), length - 1 + j, 1, view);
      layer.add_previous_hidden(hidden.data(), 1);
      layer.want_logits(0);
      layer.want_hidden(0);
      EXPECT_TRUE(layer.run().ok());
    }
  }

  ModelOptions options_{2, LoadMode::mmap};
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<MtpDrafter> drafter_;
};

TEST_F(MtpDrafterTest, DraftsAreTheLayersChainAfterARejection) {
  const std::vector<int32_t> table = pages(0, 8);
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 30, 85, 90, 272, 336, 13, 52};
  target_step(1, tokens, 0, int32_t(tokens.size()), table);
  tokens.push_back(77);  // what the target sampled
  const std::vector<int32_t> first = propose(1, tokens, 3, table);
  ASSERT_EQ(first, expected_draft(tokens, 3));
  // The target verifies the draft, keeps its first token, samples another than its second.
  std::vector<int32_t> verified = tokens;
  verified.insert(verified.end(), first.begin(), first.end());
  target_step(1, verified, int32_t(tokens.size()) - 1, 4, table);
  tokens.push_back(first[0]);
  tokens.push_back(first[1] == 5 ? 6 : 5);
  EXPECT_EQ(propose(1, tokens, 4, table), expected_draft(tokens, 4));
  // No new hidden states: no draft (the row before the last token is written already, its logits gone).
  EXPECT_TRUE(propose(1, tokens, 4, table).empty());
}

TEST_F(MtpDrafterTest, SequencesDraftTogetherAsAloneAndAfterRecomputing) {
  const std::vector<int32_t> table_a = pages(0, 4), table_b = pages(4, 4);
  std::vector<int32_t> a = {1, 403, 407, 261, 378, 30}, b = {1, 52, 100, 7, 402, 9, 44, 98, 120, 5};
  target_step(1, a, 0, int32_t(a.size()), table_a);
  target_step(2, b, 0, 6, table_b);  // b's prompt in two chunks
  std::vector<int32_t> draft_a, draft_b;
  ASSERT_TRUE(drafter_->propose({MtpSequence{1, &a, {table_a.data(), 4}, 0, nullptr}, MtpSequence{2, &b, {table_b.data(), 4}, 0, nullptr}}).ok());
  target_step(2, b, 6, int32_t(b.size()) - 6, table_b);
  b.push_back(13);
  a.push_back(12);  // a decodes a token meanwhile
  target_step(1, a, int32_t(a.size()) - 1, 1, table_a);
  a.push_back(14);
  ASSERT_TRUE(drafter_->propose({MtpSequence{1, &a, {table_a.data(), 4}, 2, &draft_a}, MtpSequence{2, &b, {table_b.data(), 4}, 3, &draft_b}}).ok());
  EXPECT_EQ(draft_a, expected_draft(a, 2));
  EXPECT_EQ(draft_b, expected_draft(b, 3));
  // a recomputed from its start into other pages (preempted, then scheduled again).
  const std::vector<int32_t> moved = pages(8, 4);
  target_step(1, a, 0, int32_t(a.size()) - 1, moved);
  EXPECT_EQ(propose(1, a, 2, moved), expected_draft(a, 2));
  drafter_->forget(1);
  EXPECT_FALSE(drafter_->has_hidden(1));
}

// A prefix hit: the second sequence's first page is the first's, whose rows
// the first wrote; the target computes the second from position 16 on.
TEST_F(MtpDrafterTest, APrefixHitDraftsFromTheRowsItShares) {
  std::vector<int32_t> first(20), second(23);
  for (size_t i = 0; i < first.size(); ++i) first[i] = int32_t(3 + (i * 37) % 500);
  for (size_t i = 0; i < second.size(); ++i) second[i] = i <= size_t(k_page) ? first[i] : int32_t(5 + (i * 11) % 400);
  const std::vector<int32_t> table_first = pages(0, 2);
  const std::vector<int32_t> table_second = {0, 2};
  target_step(1, first, 0, int32_t(first.size()), table_first);
  first.push_back(9);
  propose(1, first, 0, table_first);
  target_step(2, second, k_page, int32_t(second.size()) - k_page, table_second);
  second.push_back(21);
  // Row 15 pairs token 16 with the hidden state at 15: equal in both, as the page's key would not ensure.
  EXPECT_EQ(propose(2, second, 3, table_second), expected_draft(second, 3));
}

}  // namespace
}  // namespace ds
