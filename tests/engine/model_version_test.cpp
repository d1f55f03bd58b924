#include "engine/model_version.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

std::shared_ptr<ModelVersion> version(const std::string& label) {
  auto v = std::make_shared<ModelVersion>();
  v->label = label;
  return v;
}

TEST(ModelVersions, ARetiredVersionLivesUntilItsLastHolderLetsGo) {
  ModelVersions versions(version("A"));
  std::shared_ptr<ModelVersion> request_on_a = versions.current();  // a request bound to A
  std::weak_ptr<ModelVersion> a = request_on_a;
  EXPECT_EQ(versions.switch_to(version("B")), "A");
  EXPECT_EQ(versions.current()->label, "B");
  ASSERT_EQ(versions.live().size(), 2u);
  EXPECT_EQ(versions.live()[1]->label, "A");  // retiring, after the current one
  EXPECT_TRUE(versions.release_unheld().empty());  // A's request still runs
  EXPECT_FALSE(a.expired());
  request_on_a.reset();
  EXPECT_EQ(versions.release_unheld(), std::vector<std::string>{"A"});
  EXPECT_TRUE(a.expired());
  EXPECT_EQ(versions.live().size(), 1u);
}

TEST(ModelVersions, DrainFirstLeavesNoneCurrentAndARetiringVersionCanServeAgain) {
  ModelVersions versions(version("A"));
  std::shared_ptr<ModelVersion> a = versions.current();
  EXPECT_EQ(versions.switch_to(nullptr), "A");
  EXPECT_EQ(versions.current(), nullptr);
  EXPECT_EQ(versions.switch_to(a), "");  // an abandoned drain: A serves again
  EXPECT_EQ(versions.current(), a);
  EXPECT_EQ(versions.live().size(), 1u);  // no longer retiring as well
  a.reset();
  EXPECT_TRUE(versions.release_unheld().empty());  // the current version is never released
}

}  // namespace
}  // namespace ds
