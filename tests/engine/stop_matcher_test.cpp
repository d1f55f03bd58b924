#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheStop) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("Hello E"), "Hello ");  // "E" may begin "END"
  EXPECT_EQ(m.push("ND? no"), "");         // "END" matched
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, ReleasesTextThatTurnsOutNotToBeAStop) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("EN"), "");
  EXPECT_EQ(m.push("Ds"), "");  // "ENDs" holds "END"
  EXPECT_TRUE(m.stopped());
  StopMatcher other({"END"});
  EXPECT_EQ(other.push("EN"), "");
  EXPECT_EQ(other.push("Xy"), "ENXy");
  EXPECT_FALSE(other.stopped());
  EXPECT_EQ(other.push("E"), "");
  EXPECT_EQ(other.flush(), "E");
}

TEST(StopMatcher, StopsSpanningManyPiecesAndMultibyteText) {
  StopMatcher m({"停止"});
  std::string out;
  for (std::string piece : {"好的", "\xe5", "\x81\x9c", "\xe6\xad\xa2", "后面"}) out += m.push(piece);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "好的");
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
}

}  // namespace
}  // namespace ds
