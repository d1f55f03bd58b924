#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ds {
namespace {

TEST(Logprobs, LogSoftmaxOfTheChosenTokenAndTheTopN) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f};
  double norm = 0.0;
  for (float l : logits) norm += std::exp(double(l));
  const TokenLogprobs lp = token_logprobs(logits.data(), 4, 2, 2);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(norm), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - std::log(norm), 1e-6);
  double total = 0.0;
  for (int i = 0; i < 4; ++i) total += std::exp(token_logprobs(logits.data(), 4, i, 0).logprob);
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_TRUE(token_logprobs(logits.data(), 4, 0, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits.data(), 4, 0, 10).top.size(), 4u);
}

}  // namespace
}  // namespace ds
