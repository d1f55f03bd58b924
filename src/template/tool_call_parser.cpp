#include "template/tool_call_parser.h"

#include <nlohmann/json.hpp>

namespace ds {
namespace {

const std::string k_calls_begin = "<｜tool▁calls▁begin｜>";
const std::string k_calls_end = "<｜tool▁calls▁end｜>";
const std::string k_call_begin = "<｜tool▁call▁begin｜>";
const std::string k_call_end = "<｜tool▁call▁end｜>";
const std::string k_sep = "<｜tool▁sep｜>";
const std::string k_hermes_begin = "<tool_call>";
const std::string k_hermes_end = "</tool_call>";
const std::string k_python_tag = "<|python_tag|>";
const std::string k_dsml_invoke_open = "<｜DSML｜invoke name=\"";
const std::string k_dsml_invoke_close = "</｜DSML｜invoke>";
const std::string k_dsml_parameter_prefix = "<｜DSML｜parameter name=\"";
const std::string k_dsml_string_attribute = " string=\"";

// The element V3.2 (function_calls) or V4 (tool_calls) wraps its calls in.
std::string dsml_section(ToolCallFormat format, bool close) {
  return std::string(close ? "</" : "<") + "｜DSML｜" + (format == ToolCallFormat::deepseek_v4 ? "tool_calls" : "function_calls") + ">";
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

// How many bytes at the end of `text` could begin `marker` (so must wait for more text).
size_t partial_suffix(const std::string& text, const std::string& marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.compare(text.size() - n, n, marker, 0, n) == 0) return n;
  }
  return 0;
}

// The JSON object {"name": ..., "arguments" | "parameters": {...}} as a call.
std::optional<ParsedToolCall> call_from_json(const std::string& text) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (key && !j[key].is_object()) return std::nullopt;
  return ParsedToolCall{j["name"].get<std::string>(), key ? j[key].dump() : "{}"};
}

// A DSML call's body (NAME">, then its parameter elements) as a call: string="true" values as the
// text written, string="false" ones as JSON (text that is not JSON kept as the string the model
// wrote). Anything else in the body makes it no call. Unless `complete`, a parameter still
// arriving is left out.
std::optional<ParsedToolCall> dsml_call(const std::string& body, bool complete) {
  const size_t name_end = body.find("\">");
  if (name_end == std::string::npos || name_end == 0) return std::nullopt;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  size_t at = name_end + 2;
  for (;;) {
    const size_t open = body.find(k_dsml_parameter_prefix, at);
    if (!trim(std::string_view(body).substr(at, open == std::string::npos ? std::string::npos : open - at)).empty()) {
      if (complete || open != std::string::npos) return std::nullopt;
      break;  // a parameter's opening still arriving
    }
    if (open == std::string::npos) break;
    const size_t key_at = open + k_dsml_parameter_prefix.size(), key_end = body.find('"', key_at);
    const size_t kind_at = key_end == std::string::npos ? key_end : key_end + 1 + k_dsml_string_attribute.size();
    const size_t kind_end = kind_at == std::string::npos ? kind_at : body.find("\">", kind_at);
    const size_t value_end = kind_end == std::string::npos ? kind_end : body.find(k_dsml_parameter_close, kind_end + 2);
    if (value_end == std::string::npos) {
      if (complete) return std::nullopt;
      break;
    }
    const std::string kind = body.substr(kind_at, kind_end - kind_at);
    if (body.compare(key_end + 1, k_dsml_string_attribute.size(), k_dsml_string_attribute) != 0 || (kind != "true" && kind != "false")) {
      return std::nullopt;
    }
    const std::string key = body.substr(key_at, key_end - key_at), raw = body.substr(kind_end + 2, value_end - kind_end - 2);
    nlohmann::ordered_json value = kind == "true" ? nlohmann::ordered_json(raw) : nlohmann::ordered_json::parse(raw, nullptr, false);
    arguments[key] = value.is_discarded() ? nlohmann::ordered_json(raw) : value;
    at = value_end + k_dsml_parameter_close.size();
  }
  return ParsedToolCall{body.substr(0, name_end), arguments.dump()};
}

}  // namespace

const std::string k_dsml_parameter_close = "</｜DSML｜parameter>";

std::string dsml_parameter_open(const std::string& name, bool string) {
  return k_dsml_parameter_prefix + name + "\"" + k_dsml_string_attribute + (string ? "true" : "false") + "\">";
}

Result<ToolCallFormat> tool_call_format_from_name(const std::string& name) {
  if (name == "none") return ToolCallFormat::none;
  if (name == "deepseek-r1" || name == "deepseek-v3") return ToolCallFormat::deepseek_r1;
  if (name == "deepseek-v3.1") return ToolCallFormat::deepseek_v31;
  if (name == "deepseek-v3.2") return ToolCallFormat::deepseek_v32;
  if (name == "deepseek-v4") return ToolCallFormat::deepseek_v4;
  if (name == "hermes" || name == "qwen2.5") return ToolCallFormat::hermes;
  if (name == "llama3-json") return ToolCallFormat::llama3_json;
  return Status::error("unknown tool-call format '" + name + "' (formats: none, deepseek-r1, deepseek-v3.1, deepseek-v3.2, deepseek-v4, hermes, llama3-json)");
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::none: return "none";
    case ToolCallFormat::deepseek_r1: return "deepseek-r1";
    case ToolCallFormat::deepseek_v31: return "deepseek-v3.1";
    case ToolCallFormat::deepseek_v32: return "deepseek-v3.2";
    case ToolCallFormat::deepseek_v4: return "deepseek-v4";
    case ToolCallFormat::hermes: return "hermes";
    case ToolCallFormat::llama3_json: return "llama3-json";
  }
  return "?";
}

ToolCallSyntax tool_call_syntax(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::deepseek_r1:
      return {k_calls_begin, k_call_begin + "function" + k_sep, "\n```json\n", "\n```" + k_call_end, "", k_calls_end};
    case ToolCallFormat::deepseek_v31: return {k_calls_begin, k_call_begin, k_sep, k_call_end, "", k_calls_end};
    case ToolCallFormat::deepseek_v32:
    case ToolCallFormat::deepseek_v4: {  // as the templates write a call back: each element on its own line
      std::string close = "\n";
      close += dsml_section(format, true);
      return {dsml_section(format, false) + "\n", k_dsml_invoke_open, "\">\n", k_dsml_invoke_close, "\n", close, true};
    }
    case ToolCallFormat::hermes: return {"", k_hermes_begin + "\n{\"name\": \"", "\", \"arguments\": ", "}\n" + k_hermes_end, "\n", ""};
    case ToolCallFormat::llama3_json: return {"", "{\"name\": \"", "\", \"parameters\": ", "}", "; ", ""};
    case ToolCallFormat::none: break;
  }
  return {};
}

ToolCallFormat tool_call_format_of_template(const std::string& source) {
  if (source.find("｜DSML｜") != std::string::npos) {
    return source.find("tool_calls>") != std::string::npos ? ToolCallFormat::deepseek_v4 : ToolCallFormat::deepseek_v32;
  }
  if (source.find(k_sep) != std::string::npos) {
    // R1 and V3 write the type before the separator and fence the arguments; V3.1 writes the name.
    return source.find("```json") != std::string::npos ? ToolCallFormat::deepseek_r1 : ToolCallFormat::deepseek_v31;
  }
  if (source.find(k_hermes_begin) != std::string::npos) return ToolCallFormat::hermes;
  if (source.find(k_python_tag) != std::string::npos || source.find("\"parameters\": ") != std::string::npos) {
    return ToolCallFormat::llama3_json;
  }
  return ToolCallFormat::none;
}

ToolCallParser::Markers ToolCallParser::markers_of(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::deepseek_r1:
    case ToolCallFormat::deepseek_v31: return {k_calls_begin, k_calls_end, k_call_begin, k_call_end};
    case ToolCallFormat::deepseek_v32:
    case ToolCallFormat::deepseek_v4: return {dsml_section(format, false), dsml_section(format, true), k_dsml_invoke_open, k_dsml_invoke_close};
    case ToolCallFormat::hermes: return {"", "", k_hermes_begin, k_hermes_end};
    case ToolCallFormat::none:
    case ToolCallFormat::llama3_json: break;
  }
  return {};
}

ToolCallParser::ToolCallParser(ToolCallFormat format) : format_(format), markers_(markers_of(format)) {}

ToolCallParser::Output ToolCallParser::feed(std::string_view text) {
  Output out;
  buffer_.append(text);
  run(out, false);
  return out;
}

ToolCallParser::Output ToolCallParser::finish() {
  Output out;
  run(out, true);
  if (state_ == State::call) complete_call(buffer_, out, false);
  else if (state_ == State::whole_reply_json) {
    std::string body = trim(buffer_);
    if (body.compare(0, k_python_tag.size(), k_python_tag) == 0) body = trim(std::string_view(body).substr(k_python_tag.size()));
    std::vector<ParsedToolCall> calls;
    bool all = !body.empty();
    size_t start = 0;
    while (all && start <= body.size()) {
      const size_t semicolon = body.find(';', start);
      // A ';' inside a string would split wrongly: try the longest parse first.
      std::optional<ParsedToolCall> call = call_from_json(body.substr(start));
      if (call) {
        calls.push_back(*call);
        break;
      }
      if (semicolon == std::string::npos) all = false;
      else if ((call = call_from_json(body.substr(start, semicolon - start)))) {
        calls.push_back(*call);
        start = semicolon + 1;
      } else {
        all = false;
      }
    }
    if (all) {
      calls_seen_ += int(calls.size());
      out.calls = std::move(calls);
    } else {
      out.content += buffer_;
    }
  } else {
    out.content += buffer_;
  }
  buffer_.clear();
  state_ = State::content;
  return out;
}

void ToolCallParser::complete_call(const std::string& body, Output& out, bool finished) {
  std::optional<ParsedToolCall> call;
  if (format_ == ToolCallFormat::hermes || format_ == ToolCallFormat::deepseek_v32 || format_ == ToolCallFormat::deepseek_v4) {
    call = format_ == ToolCallFormat::hermes ? call_from_json(trim(body)) : dsml_call(body, finished);
    if (!call && finished) {
      out.content += markers_.call_open + body + markers_.call_close;  // not a call after all: the text stands
      return;
    }
  } else {
    const size_t sep = body.find(k_sep);
    if (sep != std::string::npos) {
      std::string name, arguments;
      if (format_ == ToolCallFormat::deepseek_r1) {
        const size_t newline = body.find('\n', sep);
        name = trim(std::string_view(body).substr(sep + k_sep.size(), newline == std::string::npos ? std::string::npos : newline - sep - k_sep.size()));
        std::string rest = newline == std::string::npos ? "" : trim(std::string_view(body).substr(newline + 1));
        if (rest.compare(0, 7, "```json") == 0) rest = rest.substr(7);
        else if (rest.compare(0, 3, "```") == 0) rest = rest.substr(3);
        if (rest.size() >= 3 && rest.compare(rest.size() - 3, 3, "```") == 0) rest.resize(rest.size() - 3);
        arguments = trim(rest);
      } else {
        name = trim(std::string_view(body).substr(0, sep));
        arguments = trim(std::string_view(body).substr(sep + k_sep.size()));
      }
      if (!name.empty()) call = ParsedToolCall{name, arguments.empty() ? "{}" : arguments};
    }
    if (!call && finished) {
      out.content += markers_.call_open + body + markers_.call_close;
      return;
    }
  }
  if (call) {
    ++calls_seen_;
    out.calls.push_back(std::move(*call));
  } else {
    out.content += markers_.call_open + body;
  }
}

void ToolCallParser::run(Output& out, bool at_end) {
  for (;;) {
    switch (state_) {
      case State::content: {
        if (format_ == ToolCallFormat::none) {
          out.content += buffer_;
          buffer_.clear();
          return;
        }
        if (format_ == ToolCallFormat::llama3_json) {
          if (reply_started_) {
            out.content += buffer_;
            buffer_.clear();
            return;
          }
          const size_t first = buffer_.find_first_not_of(" \t\r\n");
          if (first == std::string::npos) return;  // only whitespace so far: wait
          reply_started_ = true;
          const bool json = buffer_[first] == '{' || buffer_.compare(first, k_python_tag.size(), k_python_tag) == 0 ||
                            (buffer_.size() - first < k_python_tag.size() && k_python_tag.compare(0, buffer_.size() - first, buffer_, first) == 0);
          if (json) {
            state_ = State::whole_reply_json;
            return;
          }
          continue;
        }
        if (after_call_) {  // whitespace between calls is not content
          const size_t first = buffer_.find_first_not_of(" \t\r\n");
          buffer_.erase(0, first == std::string::npos ? buffer_.size() : first);
          if (buffer_.empty()) return;
          after_call_ = false;
        }
        // The earliest marker that opens calls; before it, content.
        std::vector<const std::string*> triggers{&markers_.call_open};
        if (!markers_.section_open.empty()) triggers.push_back(&markers_.section_open);
        size_t at = std::string::npos;
        const std::string* found = nullptr;
        for (const std::string* t : triggers) {
          const size_t p = buffer_.find(*t);
          if (p < at) at = p, found = t;
        }
        if (!found) {
          size_t hold = 0;
          if (!at_end) {
            for (const std::string* t : triggers) hold = std::max(hold, partial_suffix(buffer_, *t));
          }
          out.content += buffer_.substr(0, buffer_.size() - hold);
          buffer_.erase(0, buffer_.size() - hold);
          return;
        }
        out.content += buffer_.substr(0, at);
        buffer_.erase(0, at + found->size());
        state_ = found == &markers_.section_open ? State::section : State::call;
        continue;
      }
      case State::section: {
        // Between calls: whitespace, the next call, or the section's end.
        const size_t first = buffer_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) {
          buffer_.clear();
          return;
        }
        buffer_.erase(0, first);
        const std::string &call_open = markers_.call_open, &section_close = markers_.section_close;
        if (buffer_.compare(0, call_open.size(), call_open) == 0) {
          buffer_.erase(0, call_open.size());
          state_ = State::call;
          continue;
        }
        if (buffer_.compare(0, section_close.size(), section_close) == 0) {
          buffer_.erase(0, section_close.size());
          state_ = State::content;
          continue;
        }
        if ((call_open.compare(0, buffer_.size(), buffer_) == 0 || section_close.compare(0, buffer_.size(), buffer_) == 0) &&
            buffer_.size() < std::max(call_open.size(), section_close.size()) && !at_end) {
          return;  // a marker still arriving
        }
        state_ = State::content;  // something else: the section is over, the text is content
        continue;
      }
      case State::call: {
        const std::string& end = markers_.call_close;
        const size_t at = buffer_.find(end);
        if (at == std::string::npos) return;
        const std::string body = buffer_.substr(0, at);
        buffer_.erase(0, at + end.size());
        const int before = calls_seen_;
        complete_call(body, out, true);
        state_ = format_ == ToolCallFormat::hermes ? State::content : State::section;
        after_call_ = format_ == ToolCallFormat::hermes && calls_seen_ > before;
        continue;
      }
      case State::whole_reply_json: return;  // decided at finish()
    }
  }
}

}  // namespace ds
