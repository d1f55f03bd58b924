#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <map>

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

}  // namespace
}  // namespace ds
