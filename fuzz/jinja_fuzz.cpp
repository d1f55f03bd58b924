// libFuzzer target: a chat template is part of a model file, so any bytes
// may arrive as one. Parsing and rendering them (with small ceilings) must
// give a text or an error, never a crash, a hang or a huge allocation.

#include <cstddef>
#include <cstdint>
#include <string>

#include "template/jinja_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ds::jinja::Value;
  auto parsed = ds::jinja::JinjaTemplate::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) return 0;
  static const Value context = ds::jinja::Value::parse_json(R"({
      "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                   {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function",
                    "function": {"name": "f", "arguments": {"a": [1, 2.5, true, null]}}}]},
                   {"role": "tool", "tool_call_id": "1", "content": "r"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})").take();
  ds::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 100'000;
  (void)parsed.value().render(context, [] { return std::time_t(0); }, limits);
  return 0;
}
