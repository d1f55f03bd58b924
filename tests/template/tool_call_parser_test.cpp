// Each tool-call format, fed whole, split in two at every byte boundary and
// fed one byte at a time, must give the same content and the same calls.

#include "template/tool_call_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace ds {
namespace {

struct Parsed {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;
  bool operator==(const Parsed& o) const { return content == o.content && calls == o.calls; }
};

void add(Parsed& p, const ToolCallParser::Output& out) {
  p.content += out.content;
  for (const ParsedToolCall& c : out.calls) p.calls.emplace_back(c.name, c.arguments);
}

Parsed parse_pieces(ToolCallFormat format, const std::vector<std::string>& pieces) {
  ToolCallParser parser(format);
  Parsed p;
  for (const std::string& piece : pieces) add(p, parser.feed(piece));
  add(p, parser.finish());
  return p;
}

std::string describe(const Parsed& p) {
  std::string s = "content=[" + p.content + "]";
  for (const auto& [name, args] : p.calls) s += " call " + name + "(" + args + ")";
  return s;
}

void expect_split_invariant(ToolCallFormat format, const std::string& text, const Parsed& expected) {
  const Parsed whole = parse_pieces(format, {text});
  EXPECT_EQ(whole, expected) << describe(whole);
  for (size_t i = 0; i <= text.size(); ++i) {
    const Parsed split = parse_pieces(format, {text.substr(0, i), text.substr(i)});
    ASSERT_EQ(split, whole) << "split at byte " << i << ": " << describe(split);
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(parse_pieces(format, bytes), whole);
}

TEST(ToolCallParser, DeepSeekR1) {
  const std::string text =
      "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"q\": \"a```b\"}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  expect_split_invariant(ToolCallFormat::deepseek_r1, text,
                         {"Let me check.", {{"get_weather", "{\"city\": \"Paris\"}"}, {"search", "{\"q\": \"a```b\"}"}}});
}

TEST(ToolCallParser, DeepSeekV31) {
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"東京\"}<｜tool▁call▁end｜>"
      "<｜tool▁call▁begin｜>noargs<｜tool▁sep｜><｜tool▁call▁end｜><｜tool▁calls▁end｜> done";
  expect_split_invariant(ToolCallFormat::deepseek_v31, text,
                         {" done", {{"get_weather", "{\"city\": \"東京\"}"}, {"noargs", "{}"}}});
}

TEST(ToolCallParser, Hermes) {
  const std::string text =
      "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2]}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>";
  expect_split_invariant(ToolCallFormat::hermes, text,
                         {"Sure.\n", {{"get_weather", "{\"city\":\"Paris\",\"n\":[1,2]}"}, {"search", "{}"}}});
}

TEST(ToolCallParser, HermesBlockThatIsNotACallStaysText) {
  const std::string text = "a <tool_call>not json</tool_call> b";
  expect_split_invariant(ToolCallFormat::hermes, text, {"a <tool_call>not json</tool_call> b", {}});
}

TEST(ToolCallParser, Llama3Json) {
  expect_split_invariant(ToolCallFormat::llama3_json, "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                         {"", {{"get_weather", "{\"city\":\"Paris\"}"}}});
  expect_split_invariant(ToolCallFormat::llama3_json, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": \";\"}}",
                         {"", {{"a", "{}"}, {"b", "{\"x\":\";\"}"}}});
  expect_split_invariant(ToolCallFormat::llama3_json, "{not a call} and text", {"{not a call} and text", {}});
  expect_split_invariant(ToolCallFormat::llama3_json, "Plain answer {\"name\": \"x\"}", {"Plain answer {\"name\": \"x\"}", {}});
}

// DSML as V3.2's template writes calls back: raw strings (quotes, '<' and all), JSON for the rest.
TEST(ToolCallParser, DeepSeekV32Dsml) {
  const std::string text =
      "Let me look.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"q\" string=\"true\">a < b \"quoted\"\nline</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"filters\" string=\"false\">{\"lang\": [\"en\"]}</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"loose\" string=\"false\">not json</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  expect_split_invariant(ToolCallFormat::deepseek_v32, text,
                         {"Let me look.\n\n",
                          {{"get_weather", "{\"city\":\"Paris\",\"days\":3}"},
                           {"search", "{\"q\":\"a < b \\\"quoted\\\"\\nline\",\"filters\":{\"lang\":[\"en\"]},\"loose\":\"not json\"}"}}});
}

TEST(ToolCallParser, DeepSeekV4Dsml) {
  const std::string text =
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"now\">\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"add\">\n"
      "<｜DSML｜parameter name=\"x\" string=\"false\">1.5</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls> ok";
  expect_split_invariant(ToolCallFormat::deepseek_v4, text, {" ok", {{"now", "{}"}, {"add", "{\"x\":1.5}"}}});
  // V3.2's section is not V4's: the text stands.
  expect_split_invariant(ToolCallFormat::deepseek_v4, "<｜DSML｜function_calls>", {"<｜DSML｜function_calls>", {}});
}

TEST(ToolCallParser, ADsmlInvokeThatIsNotACallStaysText) {
  const std::string text = "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\nstray text</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  expect_split_invariant(ToolCallFormat::deepseek_v32, text, {"<｜DSML｜invoke name=\"f\">\nstray text</｜DSML｜invoke>", {}});
}

TEST(ToolCallParser, AnUnfinishedDsmlCallKeepsItsFinishedParameters) {
  const std::string text =
      "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"b\" string=\"true\">cut sh";
  expect_split_invariant(ToolCallFormat::deepseek_v32, text, {"", {{"f", "{\"a\":1}"}}});
}

TEST(ToolCallParser, TextWithoutCallsPassesThroughWhateverTheFormat) {
  for (ToolCallFormat f : {ToolCallFormat::none, ToolCallFormat::deepseek_r1, ToolCallFormat::deepseek_v31, ToolCallFormat::deepseek_v32,
                           ToolCallFormat::deepseek_v4, ToolCallFormat::hermes}) {
    expect_split_invariant(f, "No tools needed: <tool and <｜tool are just text.", {"No tools needed: <tool and <｜tool are just text.", {}});
  }
}

TEST(ToolCallParser, AnUnfinishedCallIsReportedWithWhatArrived) {
  expect_split_invariant(ToolCallFormat::deepseek_v31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1",
                         {"", {{"f", "{\"a\": 1"}}});
}

TEST(ToolCallParser, FormatOfTheFixtureTemplates) {
  EXPECT_EQ(tool_call_format_of_template("'<｜tool▁sep｜>' + name + '\\n```json\\n'"), ToolCallFormat::deepseek_r1);
  EXPECT_EQ(tool_call_format_of_template("name + '<｜tool▁sep｜>' + args"), ToolCallFormat::deepseek_v31);
  EXPECT_EQ(tool_call_format_of_template("<tool_call>"), ToolCallFormat::hermes);
  EXPECT_EQ(tool_call_format_of_template("{{ messages }}"), ToolCallFormat::none);
  const auto read = [](const std::string& name) {
    std::ifstream in(std::string(DSINFER_FIXTURES) + "/chat-templates/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(tool_call_format_of_template(read("deepseek-ai-DeepSeek-V3.2.jinja")), ToolCallFormat::deepseek_v32);
  EXPECT_EQ(tool_call_format_of_template(read("corpus/deepseek-ai-DeepSeek-V4.jinja")), ToolCallFormat::deepseek_v4);
  EXPECT_EQ(tool_call_format_of_template(read("deepseek-ai-DeepSeek-V3.1.jinja")), ToolCallFormat::deepseek_v31);
  EXPECT_EQ(tool_call_format_from_name("hermes").value(), ToolCallFormat::hermes);
  EXPECT_FALSE(tool_call_format_from_name("xml").ok());
}

}  // namespace
}  // namespace ds
