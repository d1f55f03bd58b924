// The one admission rule: never fits (the context, the pool with its
// reserve, the whole request's pages), not now (too few free pages), fits;
// each refusal with the figures it was decided on.

#include "engine/admission_rule.h"

#include <gtest/gtest.h>

#include "engine/request.h"

namespace ds {
namespace {

// A context of 256 tokens over 32 pages of 16 tokens, 10% (4 pages) in reserve.
AdmissionRule rule() { return AdmissionRule(256, 16, 32, 0.10); }

TEST(AdmissionRule, FitsWithinTheContextAndTheFreePages) {
  const Admit admit = rule().check(100, 50, 32);
  EXPECT_TRUE(admit.fits());
  EXPECT_EQ(admit.limit, Admit::Limit::none);
  EXPECT_TRUE(admit.reason.empty());
  EXPECT_EQ(rule().reserve_pages(), 4);
}

TEST(AdmissionRule, ThePromptAndItsOutputMustFitTheContext) {
  const Admit admit = rule().check(200, 57, -1);
  EXPECT_EQ(admit.verdict, Admit::Verdict::never_fits);
  EXPECT_EQ(admit.limit, Admit::Limit::context);
  EXPECT_EQ(admit.reason, "this model's context is 256 tokens; the prompt has 200 and max_tokens asks for 57");
  EXPECT_TRUE(rule().check(200, 56, -1).fits());
  // Known only as a lower bound (before tokenizing): said so.
  EXPECT_NE(rule().check(300, 1, -1, true).reason.find("the prompt has at least 300"), std::string::npos);
}

TEST(AdmissionRule, AbsentMaxTokensRunsToTheContextsEnd) {
  EXPECT_EQ(rule().max_new_tokens(200, GenerationParams::k_to_context_end), 56);
  EXPECT_EQ(rule().max_new_tokens(200, 7), 7);
  EXPECT_TRUE(rule().check(200, GenerationParams::k_to_context_end, -1).fits());
  // A prompt that fills the context leaves no room for the one token a reply needs.
  EXPECT_EQ(rule().check(256, GenerationParams::k_to_context_end, -1).limit, Admit::Limit::context);
}

TEST(AdmissionRule, APromptWhosePagesAndReserveExceedThePoolNeverFits) {
  // A pool smaller than the context: 8 pages of 16, one (10%, rounded up) in reserve.
  const AdmissionRule small(256, 16, 8, 0.10);
  const Admit admit = small.check(120, 1, 8);  // 8 pages + 1 reserve > 8
  EXPECT_EQ(admit.verdict, Admit::Verdict::never_fits);
  EXPECT_EQ(admit.limit, Admit::Limit::kv_pool);
  EXPECT_NE(admit.reason.find("needs 8 KV pages and 1 are kept in reserve, but the whole KV cache holds 8"), std::string::npos)
      << admit.reason;
  EXPECT_TRUE(small.check(112, 1, 8).fits());
  // The whole request (prompt and output) must fit the pool too.
  const Admit whole = small.check(16, 200, 8);
  EXPECT_EQ(whole.verdict, Admit::Verdict::never_fits);
  EXPECT_NE(whole.reason.find("needs 14 KV pages"), std::string::npos) << whole.reason;
}

TEST(AdmissionRule, TooFewFreePagesIsNotNow) {
  // 100 tokens: 7 pages, plus 4 in reserve = 11.
  const Admit admit = rule().check(100, 10, 10);
  EXPECT_EQ(admit.verdict, Admit::Verdict::not_now);
  EXPECT_EQ(admit.limit, Admit::Limit::kv_pool);
  EXPECT_NE(admit.reason.find("7 pages and a reserve of 4 needed, 10 of 32 free"), std::string::npos) << admit.reason;
  EXPECT_TRUE(rule().check(100, 10, 11).fits());
  EXPECT_TRUE(rule().check(100, 10, -1).fits());  // free pages unknown: only never fits is decided
}

// With a window pool of 12 pages (a horizon of 20, steps of up to 32 tokens):
// a prompt's first step takes the pages its horizon and its tokens span; too few
// free window pages is "not now", a pool that can never hold it "never".
TEST(AdmissionRule, AWindowedModelNeedsWindowPagesForItsFirstStep) {
  const AdmissionRule windowed(256, 4, 64, 0.0, WindowLimits{12, 20, 32});
  // A step of n tokens reads 20 + n positions, which span at most (20 + n + 6) / 4 pages of 4.
  EXPECT_TRUE(windowed.check(10, 5, 64, false, 9).fits());  // (20 + 10 + 6) / 4 = 9 pages
  EXPECT_EQ(windowed.check(10, 5, 64, false, 8).verdict, Admit::Verdict::not_now);
  const Admit short_of_windows = windowed.check(30, 5, 64, false, 8);  // (20 + 30 + 6) / 4 = 14 > 12
  EXPECT_EQ(short_of_windows.verdict, Admit::Verdict::never_fits);
  EXPECT_NE(short_of_windows.reason.find("more than the window pool's 12"), std::string::npos) << short_of_windows.reason;
  const Admit not_now = windowed.check(16, 5, 64, false, 8);  // (20 + 16 + 6) / 4 = 10 > 8 free
  EXPECT_EQ(not_now.verdict, Admit::Verdict::not_now);
  EXPECT_EQ(not_now.reason, "the KV window pool is too full to take this prompt now (10 window pages needed, 8 of 12 free)");
  EXPECT_TRUE(windowed.check(16, 5, 64, false, 10).fits());
}

}  // namespace
}  // namespace ds
