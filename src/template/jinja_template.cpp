#include "template/jinja_template.h"

#include <cmath>
#include <unordered_map>

#include "template/jinja_ast.h"
#include "template/jinja_builtins.h"
#include "template/jinja_printf.h"
#include "template/jinja_parser.h"

namespace ds::jinja {
namespace {

// An error that already carries its template line.
struct LocatedError : TemplateError {
  using TemplateError::TemplateError;
};

// Scopes belong to the Interpreter (its arena) and point to their parents:
// a macro holds the scope it was defined in without owning it, so no
// reference cycle outlives a rendering.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = Scope*;

enum class Flow { normal, break_, continue_ };

// jinja2 refuses an unknown filter or test when it compiles the template,
// except where it sits in an if statement or a conditional expression (a
// "soft" frame, whose branches may never run): there it fails when reached.
void check_filters_and_tests(const Expr& e, bool soft) {
  if (!soft && e.kind == Expr::Kind::filter && !has_filter(e.name)) {
    throw LocatedError("line " + std::to_string(e.line) + ": no filter named '" + e.name + "'");
  }
  if (!soft && e.kind == Expr::Kind::test && !has_test(e.name)) {
    throw LocatedError("line " + std::to_string(e.line) + ": no test named '" + e.name + "'");
  }
  for (const auto& a : e.args) {
    if (a) check_filters_and_tests(*a, soft || e.kind == Expr::Kind::conditional);
  }
  for (const auto& [name, a] : e.keyword) check_filters_and_tests(*a, soft);
}

void check_filters_and_tests(const Body& body, bool soft) {
  for (const auto& s : body) {
    const bool inner = s->kind == Stmt::Kind::for_ || s->kind == Stmt::Kind::macro || s->kind == Stmt::Kind::call_block ||
                       s->kind == Stmt::Kind::set_block || s->kind == Stmt::Kind::filter_block;
    if (s->expr) check_filters_and_tests(*s->expr, soft);
    if (s->condition) check_filters_and_tests(*s->condition, false);
    for (const auto& f : s->filters) check_filters_and_tests(*f, soft);
    for (const auto& [condition, branch] : s->branches) {
      check_filters_and_tests(*condition, true);
      check_filters_and_tests(branch, true);
    }
    for (const auto& [name, fallback] : s->params) {
      if (fallback) check_filters_and_tests(*fallback, false);
    }
    check_filters_and_tests(s->body, inner ? false : soft);
    check_filters_and_tests(s->else_body, s->kind == Stmt::Kind::if_ ? true : soft);
  }
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  if (a.is_undefined()) throw TemplateError("UndefinedError: " + a.hint());
  if (b.is_undefined()) throw TemplateError("UndefinedError: " + b.hint());
  auto unsupported = [&]() -> Value {
    throw TemplateError("TypeError: unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (a.is_number() && b.is_number()) {
    const bool real = a.is_real() || b.is_real();
    if (op == "+") return real ? Value(a.as_real() + b.as_real()) : Value(a.as_int() + b.as_int());
    if (op == "-") return real ? Value(a.as_real() - b.as_real()) : Value(a.as_int() - b.as_int());
    if (op == "*") return real ? Value(a.as_real() * b.as_real()) : Value(a.as_int() * b.as_int());
    if (op == "**") {
      if (!real && b.as_int() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < b.as_int() && i < 64; ++i) r *= a.as_int();
        return Value(r);
      }
      return Value(std::pow(a.as_real(), b.as_real()));
    }
    if (b.as_real() == 0) throw TemplateError("ZeroDivisionError: division by zero");
    if (op == "/") return Value(a.as_real() / b.as_real());
    if (op == "//") {
      if (real) return Value(std::floor(a.as_real() / b.as_real()));
      const int64_t q = a.as_int() / b.as_int();
      return Value(q - ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))));
    }
    if (op == "%") {
      if (real) {
        const double m = std::fmod(a.as_real(), b.as_real());
        return Value(m != 0 && ((m < 0) != (b.as_real() < 0)) ? m + b.as_real() : m);
      }
      const int64_t m = a.as_int() % b.as_int();
      return Value(m != 0 && ((m < 0) != (b.as_int() < 0)) ? m + b.as_int() : m);
    }
    return unsupported();
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (a.is_markup() || b.is_markup()) return Value::markup(escape_html(a).as_string() + escape_html(b).as_string());
    return Value(a.as_string() + b.as_string());
  }
  if (op == "+" && a.is_list() && b.is_list() && !a.is_generator() && !b.is_generator()) {
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == "*" && (a.is_string() || b.is_string()) && (a.is_int() || b.is_int())) {
    const std::string& s = a.is_string() ? a.as_string() : b.as_string();
    const int64_t n = a.is_int() ? a.as_int() : b.as_int();
    if (n > 0 && s.size() * size_t(n) > max_bytes) throw TemplateError("string repetition beyond the output limit");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(out);
  }
  if (op == "*" && a.is_list() != b.is_list() && (a.is_int() || b.is_int()) && !a.is_generator() && !b.is_generator()) {
    const List& items = a.is_list() ? a.as_list() : b.as_list();
    const int64_t n = a.is_int() ? a.as_int() : b.as_int();
    if (n > 0 && items.size() * size_t(n) > max_bytes) throw TemplateError("list repetition beyond the output limit");
    List out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
    return Value(std::move(out), (a.is_list() ? a : b).is_tuple() ? Value::Flavor::tuple : Value::Flavor::plain);
  }
  if (op == "%" && a.is_string()) {
    if (a.is_markup()) throw TemplateError("'%' formatting of a Markup string (which escapes its arguments) is not supported");
    return Value(printf_format(a.as_string(), b));
  }
  return unsupported();
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      throw TemplateError(std::string("TypeError: 'in <string>' requires string as left operand, not ") + item.type_name());
    }
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) return container.as_dict().find_key(item) != nullptr;
  for (const Value& v : container.iterate()) {
    if (v == item) return true;
  }
  return false;
}

class Interpreter {
 public:
  Interpreter(std::function<std::time_t()> now, const RenderLimits& limits)
      : globals_(make_globals(std::move(now), [this](const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); })),
        limits_(limits) {}

  // A namespace may hold itself (set ns.me = ns): emptied here, every cycle breaks.
  ~Interpreter() {
    for (const auto& weak : namespaces_) {
      if (auto ns = weak.lock()) ns->clear();
    }
  }

  std::string render(const Body& body, const Value& context) {
    Scope* root = child_of(nullptr);
    for (const auto& [key, value] : globals_->items) root->vars[key] = value;
    if (context.is_dict()) {
      for (const auto& [key, value] : context.as_dict().items) root->vars[key] = value;
    }
    std::string out;
    exec(body, root, out);
    return out;
  }

 private:
  Scope* child_of(Scope* parent) {
    scopes_.push_back(std::make_unique<Scope>());
    scopes_.back()->parent = parent;
    return scopes_.back().get();
  }

  void step() {
    if (++steps_ > limits_.max_steps) throw TemplateError("the template ran past " + std::to_string(limits_.max_steps) + " steps");
  }

  void write(std::string& out, const std::string& text) {
    if (out.size() + text.size() > limits_.max_output_bytes) {
      throw TemplateError("the rendering exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
    out += text;
  }

  Flow exec(const Body& body, ScopePtr scope, std::string& out) {
    for (const auto& s : body) {
      try {
        const Flow flow = exec(*s, scope, out);
        if (flow != Flow::normal) return flow;
      } catch (const LocatedError&) {
        throw;
      } catch (const TemplateError& e) {
        throw LocatedError("line " + std::to_string(s->line) + ": " + e.what());
      }
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s, ScopePtr scope, std::string& out) {
    step();
    switch (s.kind) {
      case Stmt::Kind::text: write(out, s.text); return Flow::normal;
      case Stmt::Kind::print: write(out, eval(*s.expr, scope).str()); return Flow::normal;
      case Stmt::Kind::if_:
        for (const auto& [condition, branch] : s.branches) {
          if (eval(*condition, scope).truthy()) return exec(branch, scope, out);
        }
        return exec(s.else_body, scope, out);
      case Stmt::Kind::for_: return for_loop(s, scope, out);
      case Stmt::Kind::set: {
        Value v = eval(*s.expr, scope);
        if (!s.attribute.empty()) {
          const Value* ns = scope->find(s.targets[0]);
          if (!ns || !ns->is_dict() || !ns->as_dict().is_namespace) {
            throw TemplateError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
          }
          ns->as_dict().set(s.attribute, std::move(v));
        } else {
          assign(s.targets, std::move(v), *scope);
        }
        return Flow::normal;
      }
      case Stmt::Kind::set_block: {
        std::string captured;
        exec(s.body, scope, captured);
        scope->vars[s.targets[0]] = apply_filters(s.filters, Value(captured), scope);
        return Flow::normal;
      }
      case Stmt::Kind::macro: scope->vars[s.text] = macro(s, scope, nullptr); return Flow::normal;
      case Stmt::Kind::with_block: {
        std::vector<Value> values;  // each from the scope outside, as jinja2 evaluates them
        for (const auto& [name, expr] : s.params) values.push_back(eval(*expr, scope));
        ScopePtr inner = child_of(scope);
        for (size_t i = 0; i < values.size(); ++i) inner->vars[s.params[i].first] = std::move(values[i]);
        return exec(s.body, inner, out);
      }
      case Stmt::Kind::call_block: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.args[0], scope);
        CallArgs args = arguments(call, scope, 1);
        args.keyword.emplace_back("caller", macro(s, scope, &s));
        write(out, invoke(callee, args).str());
        return Flow::normal;
      }
      case Stmt::Kind::filter_block: {
        std::string captured;
        exec(s.body, scope, captured);
        write(out, apply_filters(s.filters, Value(captured), scope).str());
        return Flow::normal;
      }
      case Stmt::Kind::break_: return Flow::break_;
      case Stmt::Kind::continue_: return Flow::continue_;
    }
    return Flow::normal;
  }

  static void assign(const std::vector<std::string>& targets, Value v, Scope& scope) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = std::move(v);
      return;
    }
    const List items = v.iterate();
    if (items.size() != targets.size()) {
      throw TemplateError("ValueError: cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
  }

  Flow for_loop(const Stmt& s, ScopePtr scope, std::string& out) {
    const Value iterable = eval(*s.expr, scope);
    if (iterable.is_none()) throw TemplateError("TypeError: 'NoneType' object is not iterable");
    List items = iterable.iterate();
    ScopePtr loop_scope = child_of(scope);
    if (s.condition) {  // {% for x in xs if cond %}: loop.* counts the items that pass
      List kept;
      for (const Value& item : items) {
        assign(s.targets, item, *loop_scope);
        if (eval(*s.condition, loop_scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, scope, out);
    const size_t n = items.size();
    for (size_t i = 0; i < n; ++i) {
      auto loop = make_dict({{"index", Value(i + 1)},
                             {"index0", Value(i)},
                             {"revindex", Value(n - i)},
                             {"revindex0", Value(n - i - 1)},
                             {"first", Value(i == 0)},
                             {"last", Value(i + 1 == n)},
                             {"length", Value(n)},
                             {"depth", Value(1)},
                             {"depth0", Value(0)},
                             {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
                             {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")}});
      loop->set("cycle", Value::function("loop.cycle", [i](CallArgs& a) {
        if (a.positional.empty()) throw TemplateError("TypeError: no items for cycling given");
        return a.positional[i % a.positional.size()];
      }));
      loop_scope->vars["loop"] = Value(loop);
      assign(s.targets, items[i], *loop_scope);
      if (exec(s.body, loop_scope, out) == Flow::break_) break;
    }
    return Flow::normal;
  }

  // A macro (or a call block's caller) as a function value: its own scope
  // over the one it was defined in, parameters bound by position or name.
  Value macro(const Stmt& s, ScopePtr defined_in, const Stmt* caller_of) {
    const std::string name = caller_of ? "caller" : s.text;
    return Value::function(name, [this, &s, defined_in, name](CallArgs& a) {
      if (++depth_ > limits_.max_call_depth) throw TemplateError("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
      struct Leave {
        int& depth;
        ~Leave() { --depth; }
      } leave{depth_};
      ScopePtr local = child_of(defined_in);
      List extra;
      for (size_t i = 0; i < a.positional.size(); ++i) {
        if (i < s.params.size()) local->vars[s.params[i].first] = a.positional[i];
        else extra.push_back(a.positional[i]);
      }
      auto extra_keywords = make_dict();
      for (const auto& [key, value] : a.keyword) {
        bool is_param = false;
        for (const auto& p : s.params) is_param = is_param || p.first == key;
        if (is_param) local->vars[key] = value;
        else if (key != "caller") extra_keywords->set(key, value);
        else local->vars["caller"] = value;
      }
      for (const auto& [param, fallback] : s.params) {
        if (local->vars.count(param)) continue;
        local->vars[param] = fallback ? eval(*fallback, local) : Value::undefined("parameter '" + param + "' was not provided");
      }
      local->vars["varargs"] = Value(extra, Value::Flavor::tuple);
      local->vars["kwargs"] = Value(extra_keywords);
      std::string out;
      exec(s.body, local, out);
      return Value(out);
    });
  }

  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, ScopePtr scope) {
    for (const auto& f : filters) v = apply_filter(f->name, v, arguments(*f, scope, 1));
    return v;
  }

  CallArgs arguments(const Expr& e, ScopePtr scope, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], scope));
    for (const auto& [name, value] : e.keyword) args.keyword.emplace_back(name, eval(*value, scope));
    return args;
  }

  Value invoke(const Value& callee, CallArgs& args) {
    if (callee.is_undefined()) throw TemplateError((callee.hint().rfind("SecurityError", 0) == 0 ? "" : "UndefinedError: ") + callee.hint());
    if (!callee.is_function()) throw TemplateError(std::string("TypeError: '") + callee.type_name() + "' object is not callable");
    return callee.as_function()(args);
  }

  Value eval(const Expr& e, ScopePtr scope) {
    step();
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return Value(std::move(items), e.kind == Expr::Kind::tuple ? Value::Flavor::tuple : Value::Flavor::plain);
      }
      case Expr::Kind::dict: {
        auto d = make_dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = eval(*e.args[i], scope);
          d->set_key(key, eval(*e.args[i + 1], scope));
        }
        return Value(d);
      }
      case Expr::Kind::attribute: {
        const Value object = eval(*e.args[0], scope);
        const bool index = !e.name.empty() && std::isdigit(uint8_t(e.name[0]));
        return index ? get_item(object, Value(int64_t(std::stoll(e.name)))) : get_attribute(object, e.name);
      }
      case Expr::Kind::subscript: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::Kind::slice: return slice(e, scope);
      case Expr::Kind::call: {
        const Value callee = eval(*e.args[0], scope);
        CallArgs args = arguments(e, scope, 1);
        return invoke(callee, args);
      }
      case Expr::Kind::filter: return apply_filter(e.name, eval(*e.args[0], scope), arguments(e, scope, 1));
      case Expr::Kind::test: {
        const bool result = apply_test(e.name, eval(*e.args[0], scope), arguments(e, scope, 1));
        return Value(result != e.negated);
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) throw TemplateError("UndefinedError: " + v.hint());
        if (!v.is_number()) throw TemplateError(std::string("TypeError: bad operand type for unary ") + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.is_real() ? v : Value(v.as_int());
        return v.is_real() ? Value(-v.as_real()) : Value(-v.as_int());
      }
      case Expr::Kind::binary: {
        const Value a = eval(*e.args[0], scope), b = eval(*e.args[1], scope);
        if (e.name == "~") return Value(a.str() + b.str());
        return arithmetic(e.name, a, b, limits_.max_output_bytes);
      }
      case Expr::Kind::logical: {
        Value a = eval(*e.args[0], scope);
        if (e.name == "and") return a.truthy() ? eval(*e.args[1], scope) : a;
        return a.truthy() ? a : eval(*e.args[1], scope);
      }
      case Expr::Kind::compare: return compare(e, scope);
      case Expr::Kind::conditional:
        if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("the conditional expression had no else");
    }
    return Value();
  }

  Value compare(const Expr& e, ScopePtr scope) {
    Value left = eval(*e.args[0], scope);
    size_t start = 0, i = 1;
    for (;; ++i) {
      const size_t space = e.name.find(' ', start);
      const std::string op = e.name.substr(start, space == std::string::npos ? std::string::npos : space - start);
      const Value right = eval(*e.args[i], scope);
      bool ok;
      if (op == "==") ok = left == right;
      else if (op == "!=") ok = !(left == right);
      else if (op == "<") ok = left.less_than(right);
      else if (op == ">") ok = right.less_than(left);
      else if (op == "<=") ok = !right.less_than(left);
      else if (op == ">=") ok = !left.less_than(right);
      else if (op == "in") ok = contains(right, left);
      else ok = !contains(right, left);
      if (!ok) return Value(false);
      if (space == std::string::npos) return Value(true);
      start = space + 1;
      left = right;
    }
  }

  Value slice(const Expr& e, ScopePtr scope) {
    const Value object = eval(*e.args[0], scope);
    auto bound = [&](size_t i) -> std::optional<int64_t> {
      if (!e.args[i]) return std::nullopt;
      const Value v = eval(*e.args[i], scope);
      if (v.is_none()) return std::nullopt;
      if (!v.is_int() && !v.is_bool()) throw TemplateError("TypeError: slice indices must be integers or None");
      return v.as_int();
    };
    const std::optional<int64_t> start = bound(1), stop = bound(2), step_opt = bound(3);
    const int64_t step = step_opt.value_or(1);
    if (step == 0) throw TemplateError("ValueError: slice step cannot be zero");
    if (object.is_undefined()) throw TemplateError("UndefinedError: " + object.hint());
    if (!object.is_string() && !(object.is_list() && !object.is_generator())) {
      throw TemplateError(std::string("TypeError: '") + object.type_name() + "' object is not subscriptable");
    }
    const List items = object.iterate();
    const int64_t n = int64_t(items.size());
    auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
      if (!v) return fallback;
      int64_t x = *v < 0 ? *v + n : *v;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t from = clamp(start, step > 0 ? 0 : n - 1), to = clamp(stop, step > 0 ? n : -1);
    List out;
    for (int64_t i = from; step > 0 ? i < to : i > to; i += step) out.push_back(items[size_t(i)]);
    if (!object.is_string()) return Value(std::move(out));
    std::string text;
    for (const Value& c : out) text += c.as_string();
    return Value(text);
  }

  std::shared_ptr<Dict> globals_;
  std::vector<std::weak_ptr<Dict>> namespaces_;
  std::vector<std::unique_ptr<Scope>> scopes_;
  const RenderLimits limits_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<JinjaTemplate> JinjaTemplate::parse(const std::string& source) {
  try {
    auto body = std::make_shared<Body>(parse_template(lex_template(source)));
    check_filters_and_tests(*body, false);
    JinjaTemplate t;
    t.body_ = std::move(body);
    return t;
  } catch (const std::exception& e) {
    return Status::error(std::string("template: ") + e.what());
  }
}

Result<std::string> JinjaTemplate::render(const Value& context, const std::function<std::time_t()>& now,
                                          const RenderLimits& limits) const {
  try {
    return Interpreter(now, limits).render(*body_, context);
  } catch (const std::exception& e) {
    return Status::error(std::string("template: ") + e.what());
  }
}

}  // namespace ds::jinja
