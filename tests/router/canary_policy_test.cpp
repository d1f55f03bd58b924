#include "router/canary_policy.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ds {
namespace {

void add_requests(VersionFigures& v, int n, double ttft, double tpot, int errors = 0) {
  for (int i = 0; i < n; ++i) v.add(i < errors ? 503 : 200, i < errors ? "http_503" : "", &ttft, &tpot);
}

StageFigures alike(int n) {
  StageFigures f;
  add_requests(f.stable, n, 100, 10);
  add_requests(f.canary, n, 100, 10);
  f.compared = n;
  f.exact = n;
  f.overlap_sum = n;
  return f;
}

TEST(CanaryPolicy, HoldsUntilEveryFigureHasItsSamples) {
  StageFigures f = alike(9);
  const Verdict v = judge(f, CanaryThresholds(), 10);
  EXPECT_EQ(v.action, Verdict::Action::hold);
  ASSERT_FALSE(v.reasons.empty());
  EXPECT_NE(v.reasons[0].find("9 of 10"), std::string::npos) << v.reasons[0];
}

TEST(CanaryPolicy, AdvancesWhenEveryFigureIsWithinBounds) {
  const Verdict v = judge(alike(10), CanaryThresholds(), 10);
  EXPECT_EQ(v.action, Verdict::Action::advance);
  EXPECT_EQ(v.reasons.size(), 5u);  // error rate, TTFT, TPOT, exact match, token overlap
}

TEST(CanaryPolicy, EachBreachRollsBack) {
  const CanaryThresholds t;
  {
    StageFigures f = alike(100);
    f.canary = VersionFigures();
    add_requests(f.canary, 100, 100, 10, 2);  // 2% errors against 0%: over +1 point
    const Verdict v = judge(f, t, 10);
    EXPECT_EQ(v.action, Verdict::Action::rollback);
    EXPECT_NE(v.reasons[0].find("error rate"), std::string::npos);
    EXPECT_EQ(f.canary.error_types.at("http_503"), 2);
  }
  {
    StageFigures f = alike(100);
    f.canary = VersionFigures();
    add_requests(f.canary, 100, 200, 10);  // TTFT doubled: over +50% and over the 20 ms slack
    EXPECT_EQ(judge(f, t, 10).action, Verdict::Action::rollback);
    f.canary = VersionFigures();
    add_requests(f.canary, 100, 115, 10);  // +15%: within
    EXPECT_EQ(judge(f, t, 10).action, Verdict::Action::advance);
    f.stable = VersionFigures(), f.canary = VersionFigures();
    add_requests(f.stable, 100, 10, 10);
    add_requests(f.canary, 100, 25, 10);  // +150%, but within the 20 ms slack
    EXPECT_EQ(judge(f, t, 10).action, Verdict::Action::advance);
  }
  {
    StageFigures f = alike(100);
    f.exact = 80;  // 80% exact match, 90% required
    EXPECT_EQ(judge(f, t, 10).action, Verdict::Action::rollback);
    f.exact = 100;
    f.overlap_sum = 90;  // mean overlap 0.9, 0.95 required
    EXPECT_EQ(judge(f, t, 10).action, Verdict::Action::rollback);
  }
}

TEST(CanaryPolicy, AThresholdSetToNullIsNotJudged) {
  CanaryThresholds t;
  t.min_exact_match.reset();
  t.min_token_overlap.reset();
  StageFigures f = alike(10);
  f.compared = 0;  // no greedy pairs at all: agreement is not waited for
  EXPECT_EQ(judge(f, t, 10).action, Verdict::Action::advance);
}

TEST(Percentile, NearestRank) {
  std::deque<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(percentile(v, 99), 99);
  EXPECT_EQ(percentile(v, 50), 50);
  EXPECT_EQ(percentile(v, 100), 100);
  EXPECT_TRUE(std::isnan(percentile({}, 99)));
}

}  // namespace
}  // namespace ds
