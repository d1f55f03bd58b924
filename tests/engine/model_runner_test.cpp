// The model runner builds the same step as a hand-written Batch: two
// sequences, logit and hidden rows in the order asked, and a new step after
// begin() forgets the last one.

#include "engine/model_runner.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

const std::string k_stories = std::string(DSINFER_FIXTURES) + "/models/stories260K.gguf";

TEST(ModelRunner, BuildsTheStepAHandWrittenBatchWouldBe) {
  auto model = Model::load(k_stories, ModelOptions{2, LoadMode::mmap});
  ASSERT_TRUE(model.ok()) << model.message();
  Model& m = *model.value();
  const KvCacheOptions options{DType::f32, 4, 16};
  auto cache_a = KvCache::create(m.backend(), m.config(), options), cache_b = KvCache::create(m.backend(), m.config(), options);
  ASSERT_TRUE(cache_a.ok() && cache_b.ok());
  const std::vector<int32_t> a = {1, 403, 407, 261, 378}, b = {1, 30, 85};
  const std::vector<int32_t> pages_a = {5, 1}, pages_b = {0, 12};

  Batch batch;  // a's five tokens from position 0, b's three from position 0; rows: b's last, a's 2nd; hidden: a's last
  for (int32_t i = 0; i < 5; ++i) batch.tokens.push_back(a[size_t(i)]), batch.positions.push_back(i), batch.seq_of_token.push_back(0);
  for (int32_t i = 0; i < 3; ++i) batch.tokens.push_back(b[size_t(i)]), batch.positions.push_back(i), batch.seq_of_token.push_back(1);
  batch.block_tables = {{pages_a.data(), 2}, {pages_b.data(), 2}};
  batch.logit_tokens = {7, 1};
  batch.hidden_tokens = {4};
  const int64_t n_vocab = m.config().n_vocab, n_embd = m.config().n_embd;
  std::vector<float> logits(2 * static_cast<size_t>(n_vocab)), hidden(static_cast<size_t>(n_embd));
  ASSERT_TRUE(m.forward(batch, *cache_a.value(), logits.data(), nullptr, hidden.data()).ok());

  ModelRunner runner(m, *cache_b.value());
  runner.begin();
  runner.add(b.data(), 0, 0, {pages_b.data(), 2});  // nothing of b yet: an empty share is allowed ...
  runner.begin();                                   // ... and forgotten by the next step
  EXPECT_EQ(runner.add(a.data(), 0, 5, {pages_a.data(), 2}), 0);
  EXPECT_EQ(runner.add(b.data(), 0, 3, {pages_b.data(), 2}), 5);
  runner.want_logits(7);
  runner.want_logits(1);
  runner.want_hidden(4);
  ASSERT_TRUE(runner.run().ok());
  EXPECT_EQ(runner.n_tokens(), 8);
  ASSERT_EQ(runner.n_logit_rows(), 2);
  for (int64_t v = 0; v < n_vocab; ++v) {
    ASSERT_EQ(runner.logits(0)[v], logits[size_t(v)]);
    ASSERT_EQ(runner.logits(1)[v], logits[size_t(n_vocab + v)]);
  }
  for (int64_t d = 0; d < n_embd; ++d) ASSERT_EQ(runner.hidden(0)[d], hidden[size_t(d)]);
}

}  // namespace
}  // namespace ds
