#include "server/tool_choice_grammar.h"

#include "grammar/json_schema.h"

namespace ds {
namespace {

// A string the model may write raw (string="true"): {"type": "string"} and annotations, nothing more.
bool is_plain_string(const jinja::Value& schema) {
  if (!schema.is_dict()) return false;
  const jinja::Value* type = schema.as_dict().find("type");
  if (!type || !type->is_string() || type->as_string() != "string") return false;
  for (const auto& [key, value] : schema.as_dict().items) {
    if (key != "type" && !grammar::is_schema_annotation(key)) return false;
  }
  return true;
}

// DSML's arguments (deepseek-v3.2, -v4): each property of an object schema as a parameter element on its
// own line, in the schema's order, the required ones always and the others optional. A plain string is
// written raw with string="true", as the models write one (it cannot contain "</", which would begin the
// close); any other value as JSON with string="false", under its own schema.
Result<grammar::SchemaRules> dsml_parameter_rules(const jinja::Value& schema, const std::string& prefix) {
  if (!schema.is_dict()) return Status::error("a DSML call's parameters must be an object schema");
  const jinja::Value *type = schema.as_dict().find("type"), *properties = schema.as_dict().find("properties"),
                     *required = schema.as_dict().find("required");
  if (type && !(type->is_string() && type->as_string() == "object")) return Status::error("type: a DSML call's parameters must be an object");
  for (const auto& [key, value] : schema.as_dict().items) {
    if (key != "type" && key != "properties" && key != "required" && key != "additionalProperties" && !grammar::is_schema_annotation(key)) {
      return Status::error(key + ": not supported for a DSML call's parameters (type, properties, required, additionalProperties are)");
    }
  }
  if (properties && !properties->is_dict()) return Status::error("properties: must be an object");
  const auto is_required = [&](const std::string& name) {
    if (!required || !required->is_list()) return false;
    for (const jinja::Value& r : required->as_list()) {
      if (r.is_string() && r.as_string() == name) return true;
    }
    return false;
  };
  grammar::SchemaRules out;
  int i = 0;
  for (const auto& [name, property] : properties ? properties->as_dict().items : std::vector<std::pair<std::string, jinja::Value>>{}) {
    std::string element;
    if (is_plain_string(property)) {
      element = grammar::gbnf_literal(dsml_parameter_open(name, true)) + " dsml-raw-text";
    } else {
      auto value = grammar::json_schema_rules(property, prefix + "p" + std::to_string(i++) + "-");
      if (!value.ok()) return Status::error("properties." + name + ": " + value.message());
      out.rules += value.value().rules;
      element = grammar::gbnf_literal(dsml_parameter_open(name, false)) + " " + value.value().value;
    }
    element += " " + grammar::gbnf_literal(k_dsml_parameter_close + "\n");
    out.value += (out.value.empty() ? "" : " ") + (is_required(name) ? element : "(" + element + ")?");
  }
  if (out.value.empty()) out.value = "\"\"";
  return out;
}

}  // namespace

Result<std::string> tool_choice_gbnf(const ChatConversation& chat, ToolCallFormat format) {
  if (format == ToolCallFormat::none) return Status::error("the chat template writes tool calls in no format dsinfer knows");
  const ToolCallSyntax syntax = tool_call_syntax(format);
  std::string rules = grammar::json_primitives(), calls;
  if (syntax.dsml_parameters) rules += "dsml-raw-text ::= ([^<] | \"<\" [^/])*\n";
  for (size_t i = 0; i < chat.tools.size(); ++i) {
    const ToolSpec& tool = chat.tools[i];
    if (chat.tool_choice.mode == ToolChoice::Mode::named && tool.name != chat.tool_choice.name) continue;
    auto schema = jinja::Value::parse_json(tool.parameters_json);
    if (!schema.ok()) return schema.status();
    const std::string prefix = "tool" + std::to_string(i) + "-";
    auto arguments = syntax.dsml_parameters ? dsml_parameter_rules(schema.value(), prefix) : grammar::json_schema_rules(schema.value(), prefix);
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
