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
  std::ofstream(path) << "# key tenant\nsk-a alpha\nsk-b beta  # trailing comment\n";
  auto admission = Admission::create(path, RateLimits{1000, 1000, 0.001, 2});
  ASSERT_TRUE(admission.ok()) << admission.message();
  Admission& a = *admission.value();
  EXPECT_EQ(a.tenant("Bearer sk-a"), "alpha");
  EXPECT_EQ(a.tenant("Bearer sk-b"), "beta");
  EXPECT_EQ(a.tenant("Bearer sk-c"), std::nullopt);
  EXPECT_EQ(a.tenant("sk-a"), std::nullopt);
  EXPECT_EQ(a.take("alpha"), 0.0);
  EXPECT_EQ(a.take("alpha"), 0.0);
  EXPECT_GT(a.take("alpha"), 0.0);  // alpha's burst of 2 is spent ...
  EXPECT_EQ(a.take("beta"), 0.0);   // ... beta's is not
  EXPECT_NE(tenant_salt("alpha"), tenant_salt("beta"));

  std::ofstream(path) << "only-a-key\n";
  EXPECT_NE(Admission::create(path, RateLimits{}).message().find(":1:"), std::string::npos);
  EXPECT_FALSE(Admission::create("/nonexistent/keys", RateLimits{}).ok());
  auto open = Admission::create("", RateLimits{1, 1, 1, 1});
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open.value()->tenant(""), "default");
}

}  // namespace
}  // namespace ds
