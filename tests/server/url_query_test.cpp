#include "server/url_query.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

TEST(UrlQuery, DecodesEscapesAndPlus) {
  auto q = parse_url_query("/v1/files?purpose=batch&after=file-%41b+c&limit=2");
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q.value().at("purpose"), "batch");
  EXPECT_EQ(q.value().at("after"), "file-Ab c");
  EXPECT_EQ(q.value().at("limit"), "2");
  EXPECT_TRUE(parse_url_query("/v1/files").value().empty());
  EXPECT_TRUE(parse_url_query("/v1/files?").value().empty());
  EXPECT_EQ(parse_url_query("/x?flag&&a=").value().at("flag"), "");
}

TEST(UrlQuery, RefusesMalformedEscapesAndRepeats) {
  EXPECT_FALSE(parse_url_query("/x?a=%4").ok());
  EXPECT_FALSE(parse_url_query("/x?a=%zz").ok());
  const auto twice = parse_url_query("/x?limit=1&limit=2");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("'limit'"), std::string::npos);
}

}  // namespace
}  // namespace ds
