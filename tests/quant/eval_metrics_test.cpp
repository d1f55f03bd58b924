#include "quant/eval_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ds {
namespace {

TEST(EvalMetrics, UniformLogitsHaveTheVocabularyAsPerplexity) {
  EvalMetrics m;
  const float logits[4] = {3, 3, 3, 3};
  for (int32_t t = 0; t < 4; ++t) m.add(logits, nullptr, 4, t);
  const EvalSummary s = m.summary();
  EXPECT_EQ(s.tokens, 4);
  EXPECT_NEAR(s.perplexity, 4.0, 1e-12);
  EXPECT_EQ(s.kl_mean, 0);
}

TEST(EvalMetrics, KlIsTheReferencesExpectationOfTheLogRatio) {
  // p = softmax(0, log 3) = (1/4, 3/4), q = (1/2, 1/2): KL(p||q) = 1/4 log(1/2) + 3/4 log(3/2).
  const float ref[2] = {0, std::log(3.0f)};
  const float model[2] = {1, 1};
  EvalMetrics m;
  m.add(model, ref, 2, 1);
  const EvalSummary s = m.summary();
  const double expected = 0.25 * std::log(0.5) + 0.75 * std::log(1.5);
  EXPECT_NEAR(s.kl_mean, expected, 1e-7);  // log(3) in float: 3 ulp of the logit
  EXPECT_NEAR(s.ref_perplexity, 4.0 / 3.0, 1e-6);
  EXPECT_NEAR(s.perplexity, 2.0, 1e-12);
  EXPECT_EQ(s.top1_agreement, 0);  // the first of a tie is the argmax: token 0 against token 1
}

TEST(EvalMetrics, P99IsTheNearestRankAndTop1CountsAgreements) {
  EvalMetrics m;
  const float ref[2] = {0, 0};
  for (int i = 0; i < 200; ++i) {
    const float model[2] = {float(i) / 100.0f, 0};  // KL grows with i; argmax agrees (token 0) every time
    m.add(model, ref, 2, 0);
  }
  const EvalSummary s = m.summary();
  // 99% of 200 = 198: the 198th smallest KL is token i = 197's.
  const double a = 1.97, kl197 = 0.5 * std::log(0.5 * (1 + std::exp(-a))) + 0.5 * std::log(0.5 * (1 + std::exp(a)));
  EXPECT_NEAR(s.kl_p99, kl197, 1e-6);
  EXPECT_GT(s.kl_max, s.kl_p99);
  EXPECT_EQ(s.top1_agreement, 1);
}

}  // namespace
}  // namespace ds
