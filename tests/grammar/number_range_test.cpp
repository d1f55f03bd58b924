// The bounded integer and number grammars against the bounds themselves:
// over a grid of values written every way JSON allows, a text is accepted
// exactly when it is a canonical JSON number within the range.

#include "grammar/number_range.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "grammar/grammar.h"
#include "support/grammar_matches.h"

namespace ds::grammar {
namespace {

Grammar compile(const Result<std::string>& body) {
  EXPECT_TRUE(body.ok()) << body.message();
  auto g = Grammar::from_gbnf("root ::= " + body.value() + "\n");
  EXPECT_TRUE(g.ok()) << g.message() << "\n" << body.value();
  return g.take();
}

std::optional<Bound> bound(std::optional<double> v, bool exclusive, bool as_int) {
  if (!v) return std::nullopt;
  return Bound{as_int ? jinja::Value(int64_t(*v)) : jinja::Value(*v), exclusive};
}

bool within(double x, std::optional<double> low, bool low_exclusive, std::optional<double> high, bool high_exclusive) {
  if (low && (low_exclusive ? !(x > *low) : !(x >= *low))) return false;
  if (high && (high_exclusive ? !(x < *high) : !(x <= *high))) return false;
  return true;
}

TEST(NumberRange, IntegersExactlyTheRange) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(-1100, 1100);
  std::vector<std::pair<std::optional<double>, std::optional<double>>> ranges = {
      {0, 0}, {0, 9}, {1, 10}, {-5, 5}, {-1000, -1}, {7, 1099}, {99, 100}, {-99, 0}, {0, std::nullopt}, {std::nullopt, 0},
      {-3, std::nullopt}, {std::nullopt, 250}, {123, 456}, {std::nullopt, std::nullopt}};
  for (int i = 0; i < 30; ++i) {
    int a = pick(rng), b = pick(rng);
    ranges.push_back({std::min(a, b), std::max(a, b)});
  }
  for (const auto& [low, high] : ranges) {
    for (const bool exclusive : {false, true}) {
      for (const bool as_int : {true, false}) {
        if (exclusive && low && high && *high - *low < 2) continue;  // empty: refused, checked below
        const Grammar g = compile(integer_range_gbnf(bound(low, exclusive, as_int), bound(high, exclusive, as_int)));
        for (int x = -1200; x <= 1200; ++x) {
          EXPECT_EQ(matches(g, std::to_string(x)), within(x, low, exclusive, high, exclusive))
              << x << " in " << (low ? *low : -1e9) << ".." << (high ? *high : 1e9) << (exclusive ? " exclusive" : "");
        }
        for (const char* odd : {"-0", "00", "01", "-01", "+1", "1.0", "1e2", ""}) EXPECT_FALSE(matches(g, odd)) << odd;
      }
    }
  }
  // Fractional bounds round inward; one past 16 digits is beyond the open side.
  const Grammar g = compile(integer_range_gbnf(Bound{jinja::Value(2.5), false}, Bound{jinja::Value(7.0), true}));
  for (int x = 0; x < 10; ++x) EXPECT_EQ(matches(g, std::to_string(x)), x >= 3 && x <= 6) << x;
  const Grammar open = compile(integer_range_gbnf(Bound{jinja::Value(int64_t(0)), false}, std::nullopt));
  EXPECT_TRUE(matches(open, "9999999999999999"));
  EXPECT_FALSE(matches(open, "10000000000000000"));
  EXPECT_FALSE(integer_range_gbnf(Bound{jinja::Value(int64_t(5)), true}, Bound{jinja::Value(int64_t(6)), true}).ok());
  EXPECT_FALSE(integer_range_gbnf(Bound{jinja::Value(1e17), false}, std::nullopt).ok());
}

// Every way to write the values of a grid: integer part, 0..3 digits after the point, trailing zeros.
std::vector<std::string> number_texts() {
  std::vector<std::string> texts;
  for (int whole = -12; whole <= 12; ++whole) {
    for (int thousandths = 0; thousandths < 1000; thousandths += 7) {
      for (const bool negative : {false, true}) {
        if (negative != (whole < 0) && whole != 0) continue;
        std::string head = negative ? "-" : "";
        head += std::to_string(std::abs(whole));
        char fraction[8];
        std::snprintf(fraction, sizeof fraction, "%03d", thousandths);
        texts.push_back(head + "." + fraction);
        if (thousandths % 10 == 0) texts.push_back(head + "." + std::string(fraction, 2));
        if (thousandths % 100 == 0) texts.push_back(head + "." + std::string(fraction, 1));
        if (thousandths == 0) texts.push_back(head);
      }
    }
  }
  return texts;
}

TEST(NumberRange, NumbersExactlyTheRange) {
  const std::vector<std::string> texts = number_texts();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(-11000, 11000);
  std::vector<std::pair<std::optional<double>, std::optional<double>>> ranges = {
      {0, 1}, {0.5, 0.75}, {-1, 1}, {-2.5, -0.25}, {0, std::nullopt}, {std::nullopt, 0}, {-0.001, 0.001}, {1.2, 1.25},
      {3, 3}, {-7.07, std::nullopt}, {std::nullopt, 9.999}, {0.1, 0.2}, {-0.5, 0}, {0, 0.5}};
  for (int i = 0; i < 40; ++i) {
    const double a = pick(rng) / 1000.0, b = pick(rng) / 1000.0;
    ranges.push_back({std::min(a, b), std::max(a, b)});
  }
  for (const auto& [low, high] : ranges) {
    for (const auto& [low_exclusive, high_exclusive] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
      if ((low_exclusive || high_exclusive) && low && high && *low == *high) continue;  // empty: refused
      const Grammar g = compile(number_range_gbnf(bound(low, low_exclusive, false), bound(high, high_exclusive, false)));
      for (const std::string& text : texts) {
        const bool negative_zero = text[0] == '-' && std::strtod(text.c_str(), nullptr) == 0;
        const bool expected = !negative_zero && within(std::strtod(text.c_str(), nullptr), low, low_exclusive, high, high_exclusive);
        EXPECT_EQ(matches(g, text), expected) << text << " in " << (low ? *low : -1e9) << (low_exclusive ? " (exclusive)" : "") << ".."
                                              << (high ? *high : 1e9) << (high_exclusive ? " (exclusive)" : "");
      }
      for (const char* odd : {"01", "1.", ".5", "+1", "1e2", ""}) EXPECT_FALSE(matches(g, odd)) << odd;
    }
  }
  EXPECT_FALSE(number_range_gbnf(Bound{jinja::Value(1.5), true}, Bound{jinja::Value(1.5), false}).ok());
  EXPECT_FALSE(number_range_gbnf(Bound{jinja::Value(2.0), false}, Bound{jinja::Value(1.0), false}).ok());
}

// Near an exclusive bound, no text the grammar takes reads back as the bound
// itself: texts creeping up on it (the bound less one in its last digit, then
// ever more 9s) are taken while they stay below it as doubles, and some are.
TEST(NumberRange, ExclusiveBoundsHoldAfterRoundingToDouble) {
  for (const auto& [edge, under] : {std::pair{"1000.5", "1000.4"}, {"0.1", "0.0"}, {"123456.789", "123456.788"},
                                    {"1234567890123.5", "1234567890123.4"}, {"7", "6."}}) {
    const double bound = std::strtod(edge, nullptr);
    const Grammar g = compile(number_range_gbnf(std::nullopt, Bound{jinja::Value(bound), true}));
    int taken = 0;
    for (size_t n = 1; n <= 24; ++n) {
      const std::string text = under + std::string(n, '9');
      if (matches(g, text)) {
        ++taken;
        EXPECT_LT(std::strtod(text.c_str(), nullptr), bound) << text;
      }
    }
    EXPECT_GT(taken, 0) << edge;
    EXPECT_FALSE(matches(g, edge));
  }
}

}  // namespace
}  // namespace ds::grammar
