#pragma once
// Turns a model's text into content and tool calls, for the tool-call
// formats of the DeepSeek family and its neighbours, fed piece by piece as
// tokens are decoded. Whatever the split of the text into pieces, the calls
// and the content come out the same (tests feed every byte boundary).
//
//   deepseek-r1    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//                  ```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>   (R1, V3)
//   deepseek-v3.1  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...
//   hermes         <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>   (Qwen2.5, Hermes)
//   llama3-json    the whole reply is {"name": NAME, "parameters": ARGS} (Llama 3.x),
//                  optionally after <|python_tag|>; several are separated by ';'
//   deepseek-v3.2  <｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//                  <｜DSML｜parameter name="KEY" string="true">RAW TEXT</｜DSML｜parameter>\n
//                  <｜DSML｜parameter name="KEY" string="false">JSON</｜DSML｜parameter>\n...
//                  </｜DSML｜invoke>\n...</｜DSML｜function_calls>   (V3.2; the arguments are
//                  the object of the parameters, in order)
//   deepseek-v4    the same with <｜DSML｜tool_calls> around the calls (V4)
//
// A call is reported once it is complete (its end marker seen), with its
// arguments as JSON text.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ds {

enum class ToolCallFormat { none, deepseek_r1, deepseek_v31, deepseek_v32, deepseek_v4, hermes, llama3_json };

// Names: none, deepseek-r1, deepseek-v3.1, deepseek-v3.2, deepseek-v4, hermes, llama3-json.
Result<ToolCallFormat> tool_call_format_from_name(const std::string& name);
const char* tool_call_format_name(ToolCallFormat format);
// The format a chat template writes tool calls in (none when it writes none dsinfer knows).
ToolCallFormat tool_call_format_of_template(const std::string& jinja_source);

// How a format spells calls, for constraining a reply to them:
// section_open (call_open NAME name_to_arguments ARGUMENTS call_close) joined by
// between, then section_close. ARGUMENTS is JSON, or with dsml_parameters each
// argument as a DSML parameter element.
struct ToolCallSyntax {
  std::string section_open, call_open, name_to_arguments, call_close, between, section_close;
  bool dsml_parameters = false;
};
// DSML's parameter element around one argument's value: raw text when `string`, else JSON.
std::string dsml_parameter_open(const std::string& name, bool string);
extern const std::string k_dsml_parameter_close;
ToolCallSyntax tool_call_syntax(ToolCallFormat format);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format);

  struct Output {
    std::string content;                // text outside tool calls, safe to send now
    std::vector<ParsedToolCall> calls;  // calls completed by this piece
  };
  Output feed(std::string_view text);
  // The end of the reply: held-back text is released; an unfinished call is
  // reported if its name is known (its arguments as far as they went).
  Output finish();


 private:
  enum class State { content, section, call, whole_reply_json };
  // The markers of a format with sections and calls (every format but llama3-json).
  struct Markers {
    std::string section_open, section_close, call_open, call_close;
  };
  static Markers markers_of(ToolCallFormat format);
  void run(Output& out, bool at_end);
  void complete_call(const std::string& body, Output& out, bool finished);

  ToolCallFormat format_;
  Markers markers_;
  State state_ = State::content;
  std::string buffer_;
  bool reply_started_ = false;  // llama3-json: the first non-space character decides
  bool after_call_ = false;     // hermes: whitespace after a call is dropped
  int calls_seen_ = 0;
};

}  // namespace ds
