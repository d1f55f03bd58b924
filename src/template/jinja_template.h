#pragma once
// A parsed Jinja template and its rendering, with the semantics of Python's
// jinja2 in the environment transformers' apply_chat_template builds (see
// tests/reference/jinja_reference.py). Rendering is bounded: output size,
// macro recursion and loop iterations have ceilings, so a hostile template
// in a model file costs an error, not the process.

#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "template/jinja_value.h"

namespace ds::jinja {

struct Stmt;

// Ceilings for one rendering, far beyond any real chat template's needs.
struct RenderLimits {
  size_t max_output_bytes = size_t(256) << 20;
  int max_call_depth = 256;           // nested macro calls
  int64_t max_steps = 50'000'000;     // statements and expressions evaluated
};

class JinjaTemplate {
 public:
  // Errors name the line and what was expected, or the filter or test that does not exist.
  static Result<JinjaTemplate> parse(const std::string& source);

  // `context` is a dict of the template's variables. Errors name the line:
  // a raise_exception() message, an undefined value used, a type error.
  Result<std::string> render(const Value& context, const std::function<std::time_t()>& now = [] { return std::time(nullptr); },
                             const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace ds::jinja
