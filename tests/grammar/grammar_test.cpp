// GBNF and JSON Schema grammars against strings they must accept and reject,
// and the trie-walking mask against a token-by-token check of the same state.

#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar.h"
#include "support/grammar_matches.h"
#include "grammar/json_schema.h"
#include "grammar/token_matcher.h"

namespace ds::grammar {
namespace {

Grammar gbnf(const std::string& text) {
  auto g = Grammar::from_gbnf(text);
  EXPECT_TRUE(g.ok()) << g.message() << "\n" << text;
  return g.ok() ? g.take() : Grammar::from_gbnf("root ::= \"\"").take();
}

struct Case {
  std::string grammar;
  std::vector<std::string> accept, reject;
};

TEST(Grammar, GbnfAcceptsAndRejects) {
  const std::vector<Case> cases = {
      {R"(root ::= "ab" | "c")", {"ab", "c"}, {"", "a", "abc", "b"}},
      {R"(root ::= [a-c]+ "!"?)", {"a", "abc!", "cc"}, {"", "!", "ad", "a!!"}},
      {R"(root ::= [^a-z\n]*)", {"", "ABC 123", "é"}, {"a", "\n"}},
      {R"(root ::= "x"{2,3} ("y" | "z"){0,1})", {"xx", "xxx", "xxy", "xxxz"}, {"x", "xxxx", "xxyy"}},
      {R"(root ::= item ("," item)*
          item ::= [0-9]+   # a comment
          )", {"1", "1,22,333"}, {"", ",", "1,", "1,,2"}},
      {R"x(root ::= "(" root ")" | "")x", {"", "()", "((()))"}, {"(", "())", ")("}},
      {R"(root ::= [α-ω] [一-龥]? .)", {"αx", "ω深x", "β\xff"}, {"a", "α", "深x"}},
      {R"(root ::= "\x41\u00e9\n\"\\")", {"Aé\n\"\\"}, {"A"}},
      {R"(root ::= ( [a] | [b] )* [c])", {"c", "ababc"}, {"ab", "abcc"}},
  };
  for (const Case& c : cases) {
    const Grammar g = gbnf(c.grammar);
    for (const std::string& s : c.accept) EXPECT_TRUE(matches(g, s)) << c.grammar << " should accept '" << s << "'";
    for (const std::string& s : c.reject) EXPECT_FALSE(matches(g, s)) << c.grammar << " should reject '" << s << "'";
  }
}

TEST(Grammar, GbnfErrorsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"rot ::= \"a\"", "root"},
      {"root ::= missing", "missing"},
      {"root ::= root \"a\" | \"b\"", "left recursion"},
      {"root ::= a\na ::= \"\" root", "left recursion"},
      {"root ::= \"open", "never closed"},
      {"root ::= [a-", "never closed"},
      {"root ::= \"a\"{3,2}", "repetition"},
      {"root ::= \"a\"\nroot ::= \"b\"", "twice"},
      {"root ::= [^é]", "ASCII"},
  };
  for (const auto& [text, expected] : bad) {
    auto g = Grammar::from_gbnf(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.message().find(expected), std::string::npos) << text << ": " << g.message();
  }
}

Grammar schema(const std::string& json) {
  auto value = jinja::Value::parse_json(json);
  EXPECT_TRUE(value.ok());
  auto text = json_schema_to_gbnf(value.value());
  EXPECT_TRUE(text.ok()) << text.message();
  return gbnf(text.value());
}

TEST(JsonSchema, AcceptsWhatTheSchemaAllowsAndNothingElse) {
  const std::vector<Case> cases = {
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"],
           "additionalProperties": false})",
       {R"({"a": 1})", R"({"a":-20,"b":"x"})", "{\n  \"a\": 0,\n  \"b\": \"\\u00e9\\n\"\n}"},
       {R"({})", R"({"b": "x"})", R"({"a": 1.5})", R"({"a": 1, "c": 2})", R"({"b": "x", "a": 1})", R"({"a": 01})"}},
      {R"({"type": "array", "items": {"enum": ["x", 2, null]}, "minItems": 1, "maxItems": 2})",
       {R"(["x"])", R"([2, null])"}, {"[]", R"(["x", 2, null])", R"(["y"])"}},
      {R"({"anyOf": [{"type": "boolean"}, {"const": {"k": [1]}}]})", {"true", R"({"k": [1]})"}, {"null", R"({"k": [2]})"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
           "required": ["next"], "additionalProperties": false}}, "$ref": "#/$defs/node"})",
       {R"({"next": null})", R"({"next": {"next": {"next": null}}})"}, {R"({"next": {}})"}},
      {R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"})", {R"("AB-123")"}, {R"("AB-12")", R"("ab-123")", R"("AB-1234")"}},
      {R"({"type": "string", "pattern": "ab"})", {R"("xaby")", R"("ab")"}, {R"("ba")"}},
      {R"({"type": "string", "minLength": 2, "maxLength": 3})", {R"("ab")", R"("a\"c")"}, {R"("a")", R"("abcd")"}},
      {R"({"type": "string", "format": "date"})", {R"("2024-02-29")"}, {R"("2024-13-01")", R"("24-01-01")"}},
      {R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"}},
      {R"({"type": ["integer", "null"]})", {"7", "null"}, {"7.5", "\"7\""}},
      {R"({"type": "object", "properties": {"a": {"type": "number"}}})", {R"({"a": 1e5})", R"({})"}, {R"({"a": "1"})", R"({"a": 1, "a": "1"})"}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})", {R"({"x": 1, "y": 2})", R"({})"}, {R"({"x": "1"})"}},
      {R"({})", {R"({"any": [1, "two", {"three": null}]})", "-0.5"}, {"{", "nul"}},
      // Lengths in code points: "é" and "\u00e9" are one; surrogate escapes are not written.
      {R"({"type": "string", "minLength": 2, "maxLength": 2})", {"\"é€\"", R"("\u00e9x")"}, {"\"é\"", R"("\ud83d\ude00")"}},
      {R"({"type": "integer", "minimum": -3, "exclusiveMaximum": 12})", {"-3", "0", "11"}, {"-4", "12", "1.0", "-0"}},
      {R"({"type": "number", "exclusiveMinimum": 0.5, "maximum": 2})", {"0.6", "1", "2", "2.000"}, {"0.5", "0.50", "2.01", "-1", "1e0"}},
      {R"({"minimum": 10})", {"10", "10.5"}, {"9.99"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
           "minProperties": 1, "maxProperties": 2})",
       {R"({"a": 1})", R"({"b": 1, "c": 2})", R"({"a": 1, "c": 2})"}, {"{}", R"({"a": 1, "b": 2, "c": 3})"}},
      {R"({"type": "object", "additionalProperties": {"type": "boolean"}, "minProperties": 2, "maxProperties": 3})",
       {R"({"x": true, "y": false})", R"({"x": true, "y": false, "z": true})"}, {R"({"x": true})", R"({"a": true, "b": true, "c": true, "d": true})"}},
      {R"({"type": "string", "format": "ipv4"})", {R"("192.168.0.1")", R"("0.0.0.0")", R"("255.255.255.255")"}, {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.1.1")"}},
      {R"({"type": "string", "format": "hostname"})", {R"("example.com")", R"("a-b.c")", R"("localhost")"}, {R"("-a.com")", R"("a..b")", R"("a_b")"}},
      {R"({"type": "string", "format": "email"})", {R"("a.b+c@example.org")"}, {R"("a@")", R"("@b.c")", R"("a..b@c")"}},
      {R"({"type": "string", "format": "uri"})", {R"("https://example.com/a/b?x=1#top")", R"("ftp://h:21")"}, {R"("example.com")", R"("http://")"}},
      {R"({"type": "string", "pattern": "^[^a-c\\d]{2}.$"})", {R"("xy€")", R"("!Zz")"}, {R"("ab.")", R"("x1.")", R"("xyzw")", R"("x")"}},
      {R"({"type": "string", "pattern": "^\\D\\S\\W$"})", {R"("ab!")"}, {R"("1b!")", R"("a b!")", R"("aba")"}},
  };
  for (const Case& c : cases) {
    const Grammar g = schema(c.grammar);
    for (const std::string& s : c.accept) EXPECT_TRUE(matches(g, s)) << c.grammar << " should accept " << s;
    for (const std::string& s : c.reject) EXPECT_FALSE(matches(g, s)) << c.grammar << " should reject " << s;
  }
}

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingTheKeyword) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"type": "integer", "multipleOf": 3})", "multipleOf"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "format": "ipv6"}}})", "ipv6"},
      {R"({"type": "integer", "minimum": 5, "exclusiveMaximum": 5})", "no integer"},
      {R"({"type": "number", "minimum": "1"})", "'minimum' must be a number"},
      {R"({"type": "object", "properties": {"a": {}}, "minProperties": 2})", "minProperties"},
      {R"({"type": "object", "maxProperties": 1, "minProperties": 2})", "minProperties exceeds"},
      {R"({"type": "string", "pattern": "[\\D]"})", "inside [...]"},
      {R"({"$ref": "#/components/x"})", "$ref"},
      {R"x({"type": "string", "pattern": "(?=a)"})x", "lookaround"},
      {R"({"type": "object", "required": ["a"], "properties": {}})", "'a'"},
      {R"({"not": {"type": "string"}})", "'not'"},
  };
  for (const auto& [json, keyword] : bad) {
    auto text = json_schema_to_gbnf(jinja::Value::parse_json(json).take());
    ASSERT_FALSE(text.ok()) << json;
    EXPECT_NE(text.message().find(keyword), std::string::npos) << text.message();
  }
}

// The mask from the trie walk equals feeding each token's bytes on its own.
TEST(TokenMatcher, MaskAgreesWithTokenByTokenCheck) {
  std::vector<std::string> vocab = {"", "{", "}", "\"", "\"a", "a", "ab", "abc", "b\"", ":", ": ", " ", "1", "12", "-", "{\"",
                                    "\":", "true", "tr", "null", ",", ", \"", "é", "\xc3", "\xa9", "\n"};
  const int32_t eos = int32_t(vocab.size());
  vocab.push_back("");
  auto trie = std::make_shared<VocabTrie>(vocab);
  auto g = std::make_shared<Grammar>(schema(R"({"type": "object", "properties": {"a": {"type": "string"}, "ab": {"type": "integer"},
      "b": {"type": "boolean"}}, "additionalProperties": false})"));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    TokenMatcher m(g, trie, {eos});
    StackSet state = initial_state(*g);
    for (int step = 0; step < 40; ++step) {
      std::vector<float> logits(vocab.size(), 0.0f);
      m.mask(logits.data(), int64_t(logits.size()));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(vocab.size()); ++t) {
        bool ok;
        if (t == eos) {
          ok = state.can_end;
        } else {
          StackSet s = state, next;
          ok = !vocab[size_t(t)].empty();
          for (const char c : vocab[size_t(t)]) {
            advance(*g, s, uint8_t(c), next);
            std::swap(s, next);
            ok = ok && s.alive();
          }
        }
        EXPECT_EQ(ok, logits[size_t(t)] == 0.0f) << "token '" << vocab[size_t(t)] << "' at step " << step;
        if (ok) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept(pick));
      if (pick == eos) break;
      for (const char c : vocab[size_t(pick)]) {
        StackSet next;
        advance(*g, state, uint8_t(c), next);
        std::swap(state, next);
      }
    }
  }
}

TEST(TokenMatcher, StartsAfterTheMarker) {
  auto trie = std::make_shared<VocabTrie>(std::vector<std::string>{"x", "</think>", "\n", "{}", ""});
  auto g = std::make_shared<Grammar>(gbnf(R"(root ::= "{}")"));
  TokenMatcher m(g, trie, {4});
  m.start_after("</think>");
  std::vector<float> logits(5, 0.0f);
  EXPECT_EQ(m.mask(logits.data(), 5), 5u);  // reasoning: unconstrained
  EXPECT_TRUE(m.accept(0));
  EXPECT_TRUE(m.accept(1));
  EXPECT_TRUE(m.active());
  EXPECT_EQ(m.mask(logits.data(), 5), 1u);
  EXPECT_EQ(logits[3], 0.0f);
  EXPECT_TRUE(m.accept(3));
  EXPECT_TRUE(m.can_end());
}

}  // namespace
}  // namespace ds::grammar
