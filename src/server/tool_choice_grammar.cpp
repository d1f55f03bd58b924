#include "server/tool_choice_grammar.h"

#include "grammar/json_schema.h"

namespace ds {

Result<std::string> tool_choice_gbnf(const ChatConversation& chat, ToolCallFormat format) {
  if (format == ToolCallFormat::none) return Status::error("the chat template writes tool calls in no format dsinfer knows");
  const ToolCallSyntax syntax = tool_call_syntax(format);
  std::string rules = grammar::json_primitives(), calls;
  for (size_t i = 0; i < chat.tools.size(); ++i) {
    const ToolSpec& tool = chat.tools[i];
    if (chat.tool_choice.mode == ToolChoice::Mode::named && tool.name != chat.tool_choice.name) continue;
    auto schema = jinja::Value::parse_json(tool.parameters_json);
    if (!schema.ok()) return schema.status();
    auto arguments = grammar::json_schema_rules(schema.value(), "tool" + std::to_string(i) + "-");
    if (!arguments.ok()) return Status::error("tools[" + std::to_string(i) + "].function.parameters: " + arguments.message());
    rules += arguments.value().rules;
    calls += (calls.empty() ? "" : " | ") + grammar::gbnf_literal(syntax.call_open + tool.name + syntax.name_to_arguments) + " " +
             arguments.value().value + " " + grammar::gbnf_literal(syntax.call_close);
  }
  rules += "call ::= " + calls + "\n";
  const std::string more = chat.parallel_tool_calls ? " (" + grammar::gbnf_literal(syntax.between) + " call)*" : "";
  // Leading whitespace: a reasoning model's answer often starts on a new line after its reasoning.
  rules += "root ::= ws " + grammar::gbnf_literal(syntax.section_open) + " call" + more + " " + grammar::gbnf_literal(syntax.section_close) + "\n";
  return rules;
}

}  // namespace ds
