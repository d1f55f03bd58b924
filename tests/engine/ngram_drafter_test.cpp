#include "engine/ngram_drafter.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

using Tokens = std::vector<int32_t>;

TEST(NgramDrafter, ContinuesTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  const SpeculationConfig config{3, 2, 4, ""};
  // The 3-gram [1 2 3] recurs at 0 (then 4 9 2); the 2-gram [2 3] more recently at 5 (then 5): the longer wins.
  EXPECT_EQ(propose_ngram_draft(config, Tokens{1, 2, 3, 4, 9, 2, 3, 5, 1, 2, 3}, 3), (Tokens{4, 9, 2}));
  // [1 2] at 0 and at 3: the later one's continuation, cut at the end of the sequence.
  EXPECT_EQ(propose_ngram_draft(config, Tokens{1, 2, 7, 1, 2, 8, 1, 2}, 5), (Tokens{8, 1, 2}));
  // A repetition loop drafts itself.
  EXPECT_EQ(propose_ngram_draft(config, Tokens{6, 6, 6, 6}, 2), (Tokens{6}));
}

TEST(NgramDrafter, NothingWithoutARecurringNgramOrRoom) {
  const SpeculationConfig config{3, 2, 4, ""};
  EXPECT_TRUE(propose_ngram_draft(config, Tokens{1, 2, 3, 4, 5}, 3).empty());
  EXPECT_TRUE(propose_ngram_draft(config, Tokens{1, 9, 2, 3, 1}, 3).empty());  // only the 1-gram [1] recurs
  EXPECT_TRUE(propose_ngram_draft(config, Tokens{1, 2, 5, 1, 2}, 0).empty());
  EXPECT_TRUE(propose_ngram_draft(config, Tokens{}, 3).empty());
  EXPECT_TRUE(propose_ngram_draft(config, Tokens{4}, 3).empty());
}

}  // namespace
}  // namespace ds
