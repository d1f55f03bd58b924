#include "server/admission.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ds {
namespace {

TEST(TokenBucket, BurstThenRefillAtTheRate) {
  const auto t0 = TokenBucket::Clock::now();
  TokenBucket bucket(2.0, 3.0, t0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.take(t0), 0.0);
  EXPECT_NEAR(bucket.take(t0), 0.5, 1e-9);  // one token every half second
  EXPECT_EQ(bucket.take(t0 + std::chrono::milliseconds(500)), 0.0);
  EXPECT_GT(bucket.take(t0 + std::chrono::milliseconds(500)), 0.0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.take(t0 + std::chrono::seconds(100)), 0.0);  // capped at capacity
  EXPECT_GT(bucket.take(t0 + std::chrono::seconds(100)), 0.0);
}

TEST(Admission, KeysMapToTenantsWithTheirOwnBuckets) {
  const std::string path = ::testing::TempDir() + "/keys.txt";
  std::ofstream(path) << "# key tenant\nsk-a alpha\nsk-b beta  # trailing comment\nsk-b2 beta\n";
  auto admission = Admission::create(path, AdmissionLimits{1000, 1000, 0.001, 2, 10, 5});
  ASSERT_TRUE(admission.ok()) << admission.message();
  Admission& a = *admission.value();
  EXPECT_EQ(a.tenant("Bearer sk-a"), "alpha");
  EXPECT_EQ(a.tenant("Bearer sk-b"), "beta");
  EXPECT_EQ(a.tenant("Bearer sk-c"), std::nullopt);
  EXPECT_EQ(a.tenant("sk-a"), std::nullopt);
  EXPECT_EQ(a.take_rate("alpha").refusal, Refusal::none);
  EXPECT_EQ(a.take_rate("alpha").refusal, Refusal::none);
  const AdmissionDecision spent = a.take_rate("alpha");  // alpha's burst of 2 is spent ...
  EXPECT_EQ(spent.refusal, Refusal::tenant_rate);
  EXPECT_GT(spent.retry_after_seconds, 0.0);
  EXPECT_EQ(a.take_rate("beta").refusal, Refusal::none);  // ... beta's is not
  EXPECT_NE(tenant_salt("alpha"), tenant_salt("beta"));
  EXPECT_EQ(Admission::count_tenants(path).value(), 2);
  EXPECT_EQ(Admission::count_tenants("").value(), 1);

  std::ofstream(path) << "only-a-key\n";
  EXPECT_NE(Admission::create(path, AdmissionLimits{}).message().find(":1:"), std::string::npos);
  EXPECT_FALSE(Admission::create("/nonexistent/keys", AdmissionLimits{}).ok());
  auto open = Admission::create("", AdmissionLimits{1, 1, 1, 1, 1, 1});
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open.value()->tenant(""), "default");
}

TEST(Admission, TheRefusalNamesTheBucketThatRanOut) {
  // The global bucket is smaller than the tenants' together: a tenant within
  // its own limit is refused by the shared one, and is told so.
  auto admission = Admission::create("", AdmissionLimits{0.001, 3, 0.001, 2, 10, 10});
  ASSERT_TRUE(admission.ok());
  Admission& a = *admission.value();
  EXPECT_EQ(a.take_rate("x").refusal, Refusal::none);
  EXPECT_EQ(a.take_rate("x").refusal, Refusal::none);
  EXPECT_EQ(a.take_rate("x").refusal, Refusal::tenant_rate);   // x's own bucket; takes nothing global
  EXPECT_EQ(a.take_rate("y").refusal, Refusal::none);          // the global bucket's third token
  EXPECT_EQ(a.take_rate("y").refusal, Refusal::global_rate);   // y is within its own limit
}

TEST(Admission, InFlightLimitsPerTenantAndOverall) {
  auto admission = Admission::create("", AdmissionLimits{1000, 1000, 1000, 1000, 3, 2});
  ASSERT_TRUE(admission.ok());
  Admission& a = *admission.value();
  EXPECT_EQ(a.enter("x"), Refusal::none);
  EXPECT_EQ(a.enter("x"), Refusal::none);
  EXPECT_EQ(a.would_enter("x"), Refusal::tenant_in_flight);
  EXPECT_EQ(a.enter("x"), Refusal::tenant_in_flight);
  EXPECT_EQ(a.enter("y"), Refusal::none);
  EXPECT_EQ(a.in_flight(), 3);
  EXPECT_EQ(a.would_enter("z"), Refusal::global_in_flight);
  EXPECT_EQ(a.enter("z"), Refusal::global_in_flight);
  a.leave("x");
  EXPECT_EQ(a.enter("z"), Refusal::none);
  a.leave("nobody");  // unknown tenants change nothing
  EXPECT_EQ(a.in_flight(), 3);
}

}  // namespace
}  // namespace ds
