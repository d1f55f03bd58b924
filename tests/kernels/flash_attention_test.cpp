// Flash-style attention over dense key/value blocks against the plain
// reference, over odd head sizes, blocks that end off the key tile, 1 and 2
// threads; a token's result alone equals its result among others; the online
// softmax of both ISAs against the formula.

#include "kernels/flash_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/attention_tiles.h"
#include "kernels/cpu_features.h"
#include "support/random_tensors.h"

namespace ds {
namespace {

struct Case {
  AttentionShape shape;
  int64_t n_keys;
  std::vector<int32_t> positions;
  std::vector<float> q, k, v;
};

Case make_case(std::mt19937& rng, int64_t n_head, int64_t head_dim, int64_t v_dim, int64_t n_keys, int64_t first, int64_t n) {
  Case c{AttentionShape{n_head, n_head, head_dim, 1.0f / std::sqrt(float(head_dim)), v_dim}, n_keys, {}, {}, {}, {}};
  for (int64_t t = 0; t < n; ++t) c.positions.push_back(int32_t(first + t));
  c.q = random_floats(rng, n * n_head * head_dim, 2.0f);  // peaked enough that the running maximum moves
  c.k = random_floats(rng, n_head * n_keys * head_dim);
  c.v = random_floats(rng, n_head * n_keys * v_dim);
  return c;
}

// The keys in blocks of block_keys positions, as the expanded MLA path passes them.
std::vector<float> flash(ThreadPool& pool, const Case& c, int64_t block_keys, int64_t first_token, int64_t n_tokens) {
  const int64_t head_dim = c.shape.head_dim, v_dim = c.shape.value_dim(), n_head = c.shape.n_head;
  const int64_t q_stride = n_head * head_dim;
  FlashAttentionState state;
  FlashAttentionScratch scratch;
  state.reset(n_head, n_tokens, v_dim);
  std::vector<float> k_block, v_block;
  for (int64_t p0 = 0; p0 < c.n_keys; p0 += block_keys) {
    const int64_t nk = std::min(block_keys, c.n_keys - p0);
    k_block.assign(size_t(n_head * nk * head_dim), 0.0f);
    v_block.assign(size_t(n_head * nk * v_dim), 0.0f);
    for (int64_t h = 0; h < n_head; ++h) {
      std::copy_n(c.k.begin() + (h * c.n_keys + p0) * head_dim, nk * head_dim, k_block.begin() + h * nk * head_dim);
      std::copy_n(c.v.begin() + (h * c.n_keys + p0) * v_dim, nk * v_dim, v_block.begin() + h * nk * v_dim);
    }
    flash_attention_block(pool, c.shape, c.q.data() + first_token * q_stride, q_stride, c.positions.data() + first_token,
                          k_block.data(), v_block.data(), p0, nk, state, scratch);
  }
  std::vector<float> out(size_t(n_tokens * n_head * v_dim));
  flash_attention_finish(pool, state, out.data(), n_head * v_dim);
  return out;
}

// The reference sums in double; the kernel's error is f32 rounding over dot
// products of head_dim terms and sums of up to n_keys terms (each ~1e-7
// relative, ~1e-5 over those lengths) and the vector exp (1e-6 relative), on
// outputs that are weighted means of N(0, 1) values: 1e-4 leaves a margin of ten.
constexpr double k_tolerance = 1e-4;

TEST(FlashAttention, MatchesTheDenseReference) {
  std::mt19937 rng(3);
  for (int n_threads : {1, 2}) {
    ThreadPool pool(n_threads);
    for (auto [n_head, head_dim, v_dim, n_keys, first, n] : {std::tuple{3, 40, 24, 150, 90, 60}, {2, 192, 128, 300, 0, 300},
                                                             {1, 8, 8, 33, 32, 1}, {4, 17, 9, 70, 5, 65}}) {
      const Case c = make_case(rng, n_head, head_dim, v_dim, n_keys, first, n);
      std::vector<float> expected(size_t(n * n_head * v_dim));
      dense_attention_reference(c.shape, c.q.data(), n_head * head_dim, c.positions.data(), n, c.k.data(), c.v.data(), n_keys,
                                expected.data(), n_head * v_dim);
      for (int64_t block : {32, 64, 256}) {
        const std::vector<float> got = flash(pool, c, block, 0, n);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], expected[i], k_tolerance) << "heads " << n_head << " dim " << head_dim << " keys " << n_keys
                                                        << " block " << block << " threads " << n_threads << " at " << i;
        }
      }
    }
  }
}

TEST(FlashAttention, ATokensResultDoesNotDependOnTheOthers) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  const Case c = make_case(rng, 3, 40, 24, 150, 90, 60);
  const std::vector<float> together = flash(pool, c, 64, 0, 60);
  const int64_t row = 3 * 24;
  for (int64_t t : {0, 7, 16, 31, 59}) {
    const std::vector<float> alone = flash(pool, c, 64, t, 1);
    for (int64_t i = 0; i < row; ++i) ASSERT_EQ(alone[size_t(i)], together[size_t(t * row + i)]) << "token " << t << " at " << i;
  }
}

TEST(FlashAttention, OnlineSoftmaxOfEveryIsaFollowsTheFormula) {
  std::mt19937 rng(5);
  std::vector<std::pair<const char*, OnlineSoftmaxFn>> isas = {{"portable", attention_tile_kernels_portable().online_softmax}};
  if (use_avx2_kernels()) isas.push_back({"avx2", attention_tile_kernels_avx2().online_softmax});
  for (const auto& [name, fn] : isas) {
    for (int64_t n : {1, 7, 8, 13, 32}) {
      const std::vector<float> first = random_floats(rng, n, 3.0f), second = random_floats(rng, n, 3.0f);
      std::vector<float> a = first, b = second;
      float max = -INFINITY, sum = 0.0f;
      EXPECT_EQ(fn(a.data(), n, &max, &sum), 0.0f) << name;
      const float kept_max = max;
      const float correction = fn(b.data(), n, &max, &sum);
      double expected_max = -INFINITY, expected_sum = 0.0;
      for (float x : first) expected_max = std::max<double>(expected_max, x);
      for (float x : second) expected_max = std::max<double>(expected_max, x);
      for (float x : first) expected_sum += std::exp(double(x) - expected_max);
      for (float x : second) expected_sum += std::exp(double(x) - expected_max);
      EXPECT_EQ(max, float(expected_max)) << name;
      EXPECT_NEAR(correction, std::exp(double(kept_max) - expected_max), 1e-6) << name;
      EXPECT_NEAR(sum, expected_sum, 1e-5 * expected_sum) << name << " n " << n;
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(b[size_t(i)], std::exp(double(second[size_t(i)]) - expected_max), 1e-6) << name;
      float unchanged_max = max, unchanged_sum = sum;
      EXPECT_EQ(fn(b.data(), 0, &unchanged_max, &unchanged_sum), 1.0f) << name;
      EXPECT_EQ(unchanged_max, max);
      EXPECT_EQ(unchanged_sum, sum);
    }
  }
}

}  // namespace
}  // namespace ds
