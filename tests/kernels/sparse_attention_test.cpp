// DeepSeek Sparse Attention's kernels (kernels/sparse_attention.h) against
// their references: the indexer's choice exactly, attention over the chosen
// positions within f32 summation order, over scattered pages, with 1 and 2
// threads; taking every position is dense causal attention; a token's
// result does not depend on the others in its step.

#include "kernels/sparse_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/paged_attention.h"
#include "support/random_tensors.h"
#include "tensor/dtype.h"

namespace ds {
namespace {

// Two sequences of 37 and 6 tokens over pages of 4 scattered in a pool of 24.
struct ScatteredCache {
  // Random rows of `row` elements at every position.
  ScatteredCache(DType dtype, int64_t row, std::mt19937& rng) : dtype(dtype), row(row) {
    memory.resize(size_t(24 * 4 * row_bytes(dtype, row)));
    for (int p = 0; p < 37; ++p) positions.push_back(p), seqs.push_back(0);
    for (int p = 0; p < 6; ++p) positions.push_back(p), seqs.push_back(1);
    const std::vector<float> rows = random_floats(rng, n() * row);
    kv_write(view(), rows.data(), nullptr, n(), positions.data(), seqs.data(), tables);
  }
  KvLayerView view() { return KvLayerView{dtype, memory.data(), nullptr, 4, row, 1}; }
  int64_t n() const { return int64_t(positions.size()); }

  DType dtype;
  int64_t row;
  std::vector<uint8_t> memory;
  std::vector<int32_t> table_a = {7, 2, 19, 3, 4, 5, 6, 8, 9, 10}, table_b = {0, 13};
  const BlockTableView tables[2] = {{table_a.data(), 10}, {table_b.data(), 2}};
  std::vector<int32_t> positions, seqs;
};

// Each token's chosen positions: top_k slots, n_selected[t] of them used.
struct Selection {
  std::vector<int32_t> selected, n_selected;
};

// Up to top_k of each token's positions, ascending: the first ones, or (with
// rng) ones drawn at random.
Selection choose(const ScatteredCache& cache, int64_t top_k, std::mt19937* rng) {
  Selection s{std::vector<int32_t>(size_t(cache.n() * top_k)), {}};
  for (int64_t t = 0; t < cache.n(); ++t) {
    std::vector<int32_t> all(size_t(cache.positions[size_t(t)] + 1));
    for (size_t p = 0; p < all.size(); ++p) all[p] = int32_t(p);
    if (rng) std::shuffle(all.begin(), all.end(), *rng);
    all.resize(std::min<size_t>(all.size(), size_t(top_k)));
    std::sort(all.begin(), all.end());
    std::copy(all.begin(), all.end(), s.selected.begin() + t * top_k);
    s.n_selected.push_back(int32_t(all.size()));
  }
  return s;
}

// sparse_attention of queries q [n, shape.n_head, head_dim] over the chosen positions.
std::vector<float> attend(ThreadPool& pool, ScatteredCache& cache, const AttentionShape& shape, const std::vector<float>& q,
                          const Selection& s, int64_t top_k) {
  std::vector<float> out(size_t(cache.n() * shape.n_head * shape.value_dim()));
  SparseAttentionScratch scratch;
  sparse_attention(pool, cache.view(), shape, q.data(), cache.n(), cache.seqs.data(), cache.tables, s.selected.data(),
                   s.n_selected.data(), top_k, out.data(), scratch);
  return out;
}

// (KV type, threads).
class SparseAttentionTest : public ::testing::TestWithParam<std::tuple<DType, int>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  ThreadPool pool{std::get<1>(GetParam())};
};

TEST_P(SparseAttentionTest, EveryPositionSelectedIsDenseCausalAttention) {
  std::mt19937 rng(3);
  const int64_t head_dim = 24, v_dim = 16, n_head = 9, top_k = 37;
  ScatteredCache cache(dtype(), head_dim, rng);
  const int64_t n = cache.n();
  const std::vector<float> q = random_floats(rng, n * n_head * head_dim);
  const AttentionShape shape{n_head, 1, head_dim, 1.0f / std::sqrt(float(head_dim)), v_dim};
  // top_k: the longest context, so the first top_k positions are all of them.
  const std::vector<float> out = attend(pool, cache, shape, q, choose(cache, top_k, nullptr), top_k);
  std::vector<float> dense(out.size());
  paged_attention_reference(cache.view(), shape, q.data(), n, cache.positions.data(), cache.seqs.data(), cache.tables, dense.data());
  // Both sum at most 37 f32 products of unit-sized terms: within 1e-4 of each other.
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], dense[i], 1e-4) << i;
}

TEST_P(SparseAttentionTest, ChosenPositionsMatchTheReferenceAndDoNotDependOnTheStep) {
  std::mt19937 rng(4);
  const int64_t head_dim = 40, v_dim = 32, n_head = 12, top_k = 5;
  ScatteredCache cache(dtype(), head_dim, rng);
  const int64_t n = cache.n();
  const Selection chosen = choose(cache, top_k, &rng);
  const std::vector<int32_t>& selected = chosen.selected;
  const std::vector<int32_t>& n_selected = chosen.n_selected;
  const std::vector<float> q = random_floats(rng, n * n_head * head_dim);
  const AttentionShape shape{n_head, 1, head_dim, 1.0f / std::sqrt(float(head_dim)), v_dim};
  const std::vector<float> out = attend(pool, cache, shape, q, chosen, top_k);
  std::vector<float> expected(out.size());
  sparse_attention_reference(cache.view(), shape, q.data(), n, cache.seqs.data(), cache.tables, selected.data(), n_selected.data(),
                             top_k, expected.data());
  // f32 sums of at most five unit-sized terms against double: within 1e-5.
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-5) << i;
  std::vector<float> alone(size_t(n_head * v_dim));
  SparseAttentionScratch scratch;
  for (int64_t t : {int64_t(0), int64_t(20), n - 1}) {
    sparse_attention(pool, cache.view(), shape, q.data() + t * n_head * head_dim, 1, cache.seqs.data() + t, cache.tables,
                     selected.data() + t * top_k, n_selected.data() + t, top_k, alone.data(), scratch);
    EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + t * n_head * v_dim, alone.size() * sizeof(float))) << t;
  }
}

TEST_P(SparseAttentionTest, IndexerPicksTheReferencesTopK) {
  std::mt19937 rng(6);
  // Eight heads with weights of either sign: a score of exactly zero (every
  // head's product negative) is rare, and so are ties, which f32 against
  // double could order differently.
  const int64_t key_dim = 32, n_heads = 8, top_k = 7;
  ScatteredCache cache(dtype(), key_dim, rng);
  const int64_t n = cache.n();
  const std::vector<float> q = random_floats(rng, n * n_heads * key_dim), weights = random_floats(rng, n * n_heads);
  const float scale = 0.0625f;
  std::vector<int32_t> selected(size_t(n * top_k), -1), n_selected(static_cast<size_t>(n)), expected(selected.size(), -1), n_expected(n_selected);
  SparseAttentionScratch scratch;
  indexer_select(pool, cache.view(), q.data(), n_heads, weights.data(), scale, n, cache.positions.data(), cache.seqs.data(), cache.tables,
                 top_k, selected.data(), n_selected.data(), scratch);
  indexer_select_reference(cache.view(), q.data(), n_heads, weights.data(), scale, n, cache.positions.data(), cache.seqs.data(),
                           cache.tables, top_k, expected.data(), n_expected.data());
  EXPECT_EQ(n_selected, n_expected);
  EXPECT_EQ(selected, expected);
  // A token with at most top_k positions takes them all: position 3 of either sequence.
  EXPECT_EQ(n_selected[3], 4);
  EXPECT_EQ(std::vector<int32_t>(selected.begin() + 3 * top_k, selected.begin() + 3 * top_k + 4), (std::vector<int32_t>{0, 1, 2, 3}));
}

// Past a tile of keys (256) the indexer scores a decode token's positions on
// every thread; the choice equals the reference's and the one its token makes
// in a step of many.
TEST_P(SparseAttentionTest, AlongContextIsChosenTheSameAloneAndInAStep) {
  std::mt19937 rng(9);
  const int64_t key_dim = 32, n_heads = 8, top_k = 20, n_ctx = 700, page_tokens = 16;
  std::vector<int32_t> table(size_t((n_ctx + page_tokens - 1) / page_tokens));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(table.size() - 1 - i);  // pages in reverse
  const BlockTableView tables[] = {{table.data(), int32_t(table.size())}};
  std::vector<uint8_t> memory(size_t(int64_t(table.size()) * page_tokens * row_bytes(dtype(), key_dim)));
  const KvLayerView keys{dtype(), memory.data(), nullptr, page_tokens, key_dim, 1};
  std::vector<int32_t> positions(static_cast<size_t>(n_ctx)), seqs(static_cast<size_t>(n_ctx), 0);
  for (int32_t p = 0; p < n_ctx; ++p) positions[size_t(p)] = p;
  const std::vector<float> rows = random_floats(rng, n_ctx * key_dim);
  kv_write(keys, rows.data(), nullptr, n_ctx, positions.data(), seqs.data(), tables);
  // The last four positions' tokens, in one step and one at a time.
  const int64_t n = 4, first = n_ctx - n;
  const std::vector<float> q = random_floats(rng, n * n_heads * key_dim), weights = random_floats(rng, n * n_heads);
  std::vector<int32_t> in_step(size_t(n * top_k)), counts(static_cast<size_t>(n)), expected(in_step.size()), n_expected(counts);
  SparseAttentionScratch scratch;
  indexer_select(pool, keys, q.data(), n_heads, weights.data(), 0.125f, n, positions.data() + first, seqs.data(), tables, top_k,
                 in_step.data(), counts.data(), scratch);
  indexer_select_reference(keys, q.data(), n_heads, weights.data(), 0.125f, n, positions.data() + first, seqs.data(), tables, top_k,
                           expected.data(), n_expected.data());
  EXPECT_EQ(in_step, expected);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> alone(static_cast<size_t>(top_k));
    int32_t count = 0;
    indexer_select(pool, keys, q.data() + t * n_heads * key_dim, n_heads, weights.data() + t * n_heads, 0.125f, 1,
                   positions.data() + first + t, seqs.data(), tables, top_k, alone.data(), &count, scratch);
    EXPECT_EQ(count, top_k);
    EXPECT_EQ(alone, std::vector<int32_t>(in_step.begin() + t * top_k, in_step.begin() + (t + 1) * top_k)) << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseAttentionTest,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16), ::testing::Values(1, 2)));

}  // namespace
}  // namespace ds
