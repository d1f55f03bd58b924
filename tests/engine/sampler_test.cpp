#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace ds {
namespace {

const std::vector<float> k_logits = {1.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f};

// Sampling at `temperature` with no top-k, top-p or min-p cut.
SamplingParams uncut(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

TEST(Sampler, GreedyTakesTheArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler sampler(p);
  EXPECT_EQ(sampler.sample(k_logits.data(), 6, {}), 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  SamplingParams p = uncut(1.5f);
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler sampler(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(sampler.sample(k_logits.data(), 6, {}));
    return out;
  };
  EXPECT_EQ(draw(1), draw(1));
  EXPECT_NE(draw(1), draw(2));
}

TEST(Sampler, TopKOneIsGreedyAndTopKLimitsTheSupport) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  Sampler one(p);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(one.sample(k_logits.data(), 6, {}), 1);
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler three(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = three.sample(k_logits.data(), 6, {});
    EXPECT_TRUE(t == 1 || t == 2 || t == 5) << t;
  }
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.5f;
  p.min_p = 0.0f;
  Sampler top_p(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = top_p.sample(k_logits.data(), 6, {});
    EXPECT_TRUE(t == 1 || t == 5) << t;
  }
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p_max: logits within ln 2 of the max
  Sampler min_p(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = min_p.sample(k_logits.data(), 6, {});
    EXPECT_TRUE(t == 1 || t == 2 || t == 5) << t;
  }
}

TEST(Sampler, PenaltiesSteerAwayFromSeenTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  Sampler repetition(p);
  EXPECT_EQ(repetition.sample(k_logits.data(), 6, {1}), 5);  // 3.0 / 2 < 2.9
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.3f;
  Sampler frequency(p);
  EXPECT_EQ(frequency.sample(k_logits.data(), 6, {1, 1}), 5);  // 3.0 - 0.6 < 2.9
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.2f;
  Sampler presence(p);
  EXPECT_EQ(presence.sample(k_logits.data(), 6, {1, 1, 1}), 5);  // 3.0 - 0.2 < 2.9
}

TEST(Sampler, TemperatureSharpensTheDistribution) {
  SamplingParams p = uncut(0.05f);
  Sampler cold(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 500; ++i) ++counts[cold.sample(k_logits.data(), 6, {})];
  EXPECT_GT(counts[1], 400);
}

TEST(Sampler, LogitBiasBansAndForcesTokens) {
  SamplingParams p = uncut(1.5f);
  p.logit_bias = {{1, -100.0f}, {5, -100.0f}, {99, 50.0f}};  // ids past the vocabulary change nothing
  Sampler banned(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 1000; ++i) ++counts[banned.sample(k_logits.data(), 6, {})];
  EXPECT_EQ(counts[1] + counts[5], 0);  // the two likeliest tokens never appear
  EXPECT_GT(counts[2], 0);
  p.logit_bias = {{3, 100.0f}};
  Sampler forced(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(forced.sample(k_logits.data(), 6, {}), 3);
  p.temperature = 0.0f;
  Sampler greedy(p);
  EXPECT_EQ(greedy.sample(k_logits.data(), 6, {}), 3);
}

// The distribution the sampling chain defines, written from its definition
// in double precision: penalties over the last penalty_last_n tokens of the
// history (repetition divides a positive logit and multiplies a negative
// one; frequency per occurrence and presence once are subtracted), the
// logit bias, top-k by logit, then top-p (the shortest head whose mass
// reaches top_p) and min-p (p >= min_p * p_max) on the probabilities at
// temperature 1 over the top-k set, then the softmax at the temperature over
// what is left.
std::vector<double> chain_distribution(const std::vector<float>& logits, const SamplingParams& p, const std::vector<int32_t>& history) {
  const size_t n_vocab = logits.size();
  std::vector<double> z(logits.begin(), logits.end());
  std::map<int32_t, int> seen;
  const size_t window = p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
  for (size_t i = history.size() - window; i < history.size(); ++i) ++seen[history[i]];
  for (const auto& [id, count] : seen) {
    double& v = z[size_t(id)];
    v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    v -= count * double(p.frequency_penalty) + p.presence_penalty;
  }
  for (const auto& [id, bias] : p.logit_bias) z[size_t(id)] += bias;
  std::vector<size_t> order(n_vocab);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
  size_t kept = p.top_k > 0 ? std::min(n_vocab, size_t(p.top_k)) : n_vocab;
  const auto softmax = [&](double temperature, size_t n) {
    std::vector<double> q(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += q[i] = std::exp((z[order[i]] - z[order[0]]) / temperature);
    for (double& v : q) v /= sum;
    return q;
  };
  const std::vector<double> at_one = softmax(1.0, kept);
  if (p.top_p < 1.0f) {
    double mass = 0;
    size_t head = 0;
    while (head < kept && mass < p.top_p) mass += at_one[head++];
    kept = head;
  }
  if (p.min_p > 0.0f) kept = size_t(std::count_if(at_one.begin(), at_one.begin() + long(kept), [&](double v) { return v >= p.min_p * at_one[0]; }));
  const std::vector<double> q = softmax(p.temperature, kept);
  std::vector<double> out(n_vocab, 0.0);
  for (size_t i = 0; i < kept; ++i) out[order[i]] = q[i];
  return out;
}

// Draws n tokens and compares their counts with chain_distribution by
// Pearson's chi-square. The bound is the chi-square quantile at 1 - 1e-6
// (Wilson-Hilferty, z = 4.75): a correct sampler exceeds it for one seed in
// a million, and the seed is fixed, so the outcome never changes from run to
// run. A token of probability 0 must never be drawn.
void expect_chain_distribution(const std::vector<float>& logits, const SamplingParams& p, const std::vector<int32_t>& history) {
  const std::vector<double> expected = chain_distribution(logits, p, history);
  constexpr int k_draws = 200000;
  Sampler sampler(p);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < k_draws; ++i) ++counts[size_t(sampler.sample(logits.data(), int64_t(logits.size()), history))];
  double chi2 = 0;
  int df = -1;
  for (size_t t = 0; t < logits.size(); ++t) {
    if (expected[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " is outside the chain's support";
      continue;
    }
    const double e = expected[t] * k_draws;
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
    ++df;
  }
  if (df == 0) return;  // one token left: all draws are it (checked above)
  const double c = 2.0 / (9.0 * df);
  const double bound = df * std::pow(1.0 - c + 4.75 * std::sqrt(c), 3.0);
  EXPECT_LT(chi2, bound) << "chi-square " << chi2 << " over " << df << " degrees of freedom";
}

const std::vector<float> k_wide = {1.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f, -0.3f, 2.0f};

TEST(SamplerDistribution, TemperatureAlone) {
  expect_chain_distribution(k_wide, uncut(0.7f), {});
  expect_chain_distribution(k_wide, uncut(1.6f), {});
}

TEST(SamplerDistribution, TopKThenTemperature) {
  SamplingParams p = uncut(1.3f);
  p.top_k = 4;
  expect_chain_distribution(k_wide, p, {});
}

TEST(SamplerDistribution, TopPAndMinP) {
  SamplingParams p = uncut(1.0f);
  p.top_p = 0.8f;
  expect_chain_distribution(k_wide, p, {});
  p = uncut(1.5f);
  p.min_p = 0.2f;
  expect_chain_distribution(k_wide, p, {});
}

TEST(SamplerDistribution, PenaltiesOverTheWindowAndBias) {
  SamplingParams p = uncut(1.0f);
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.25f;
  p.penalty_last_n = 4;  // token 3 at the start of the history is outside the window
  p.logit_bias = {{6, 1.5f}};
  expect_chain_distribution(k_wide, p, {3, 1, 1, 5, 7});
}

TEST(SamplerDistribution, TheWholeChain) {
  const SamplingParams p{.temperature = 0.9f, .top_k = 6, .top_p = 0.9f, .min_p = 0.1f, .repetition_penalty = 1.1f,
                         .frequency_penalty = 0.1f, .seed = 7, .logit_bias = {}};
  expect_chain_distribution(k_wide, p, {2, 7, 2});
}

}  // namespace
}  // namespace ds
