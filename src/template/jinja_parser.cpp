#include "template/jinja_parser.h"

#include <set>

namespace ds::jinja {
namespace {

using T = Token::Type;

// Nesting deeper than this (brackets, operators, blocks) is refused: the
// parser and the interpreter recurse, and a crafted template must not take the stack.
constexpr int k_max_nesting = 256;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse() {
    Body body = statements({});
    if (peek().type != T::end) fail("unexpected {% " + block_keyword() + " %}");
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().type == T::op && peek().value == op; }
  bool at_name(const char* name) const { return peek().type == T::name && peek().value == name; }
  bool accept_op(const char* op) {
    if (!at_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(const char* name) {
    if (!at_name(name)) return false;
    ++i_;
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError("line " + std::to_string(peek().line) + ": " + what);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::end: return "the end of the template";
      case T::print_end: return "'}}'";
      case T::block_end: return "'%}'";
      case T::text: return "text";
      default: return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', found " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().type != T::name) fail("expected a name, found " + describe(peek()));
    return next().value;
  }
  void expect(T type, const char* what) {
    if (peek().type != type) fail(std::string("expected ") + what + ", found " + describe(peek()));
    ++i_;
  }
  std::string block_keyword() const { return peek(1).type == T::name ? peek(1).value : "?"; }

  // Statements until a {% KEYWORD %} in `ends` (left unconsumed, at its block_begin) or the end.
  Body statements(const std::set<std::string>& ends) {
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.type == T::end) {
        if (!ends.empty()) fail("the template ends before {% " + *ends.begin() + " %}");
        return body;
      }
      if (t.type == T::text) {
        auto s = make(Stmt::Kind::text);
        s->text = next().value;
        body.push_back(std::move(s));
      } else if (t.type == T::print_begin) {
        auto s = make(Stmt::Kind::print);
        ++i_;
        s->expr = tuple_or_expression();
        expect(T::print_end, "'}}'");
        body.push_back(std::move(s));
      } else {
        if (ends.count(block_keyword())) return body;
        ++i_;
        body.push_back(block());
      }
    }
  }

  std::unique_ptr<Stmt> make(Stmt::Kind kind) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = peek().line;
    return s;
  }

  void end_tag(const char* keyword) {
    expect(T::block_begin, "{%");
    if (!accept_name(keyword)) fail(std::string("expected {% ") + keyword + " %}");
    expect(T::block_end, "'%}'");
  }

  struct Nested {
    Parser& p;
    explicit Nested(Parser& parser) : p(parser) {
      if (++p.depth_ > k_max_nesting) p.fail("the template nests deeper than " + std::to_string(k_max_nesting) + " levels");
    }
    ~Nested() { --p.depth_; }
  };

  std::unique_ptr<Stmt> block() {
    Nested nested(*this);
    const std::string keyword = expect_name();
    if (keyword == "if") return if_block();
    if (keyword == "for") return for_block();
    if (keyword == "set") return set_statement();
    if (keyword == "macro") return macro_block();
    if (keyword == "call") return call_block();
    if (keyword == "filter") return filter_block();
    if (keyword == "with") return with_block();
    if (keyword == "break" || keyword == "continue") {
      auto s = make(keyword == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_);
      expect(T::block_end, "'%}'");
      return s;
    }
    --i_;
    fail("{% " + keyword + " %} is not a statement dsinfer's Jinja supports" +
         (keyword.rfind("end", 0) == 0 || keyword == "else" || keyword == "elif" ? " here (nothing open to close)" : ""));
  }

  std::unique_ptr<Stmt> if_block() {
    auto s = make(Stmt::Kind::if_);
    ExprPtr condition = expression();
    expect(T::block_end, "'%}'");
    for (;;) {
      Body body = statements({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(condition), std::move(body));
      expect(T::block_begin, "{%");
      const std::string keyword = expect_name();
      if (keyword == "elif") {
        condition = expression();
        expect(T::block_end, "'%}'");
        continue;
      }
      expect(T::block_end, "'%}'");
      if (keyword == "else") {
        s->else_body = statements({"endif"});
        end_tag("endif");
      }
      return s;
    }
  }

  std::unique_ptr<Stmt> for_block() {
    auto s = make(Stmt::Kind::for_);
    do s->targets.push_back(expect_name());
    while (accept_op(","));
    if (!accept_name("in")) fail("expected 'in' in a for loop");
    s->expr = expression(false);
    if (accept_name("if")) s->condition = expression(false);
    if (accept_name("recursive")) fail("recursive for loops are not supported");
    expect(T::block_end, "'%}'");
    s->body = statements({"else", "endfor"});
    expect(T::block_begin, "{%");
    if (accept_name("else")) {
      expect(T::block_end, "'%}'");
      s->else_body = statements({"endfor"});
      expect(T::block_begin, "{%");
    }
    if (!accept_name("endfor")) fail("expected {% endfor %}");
    expect(T::block_end, "'%}'");
    return s;
  }

  std::unique_ptr<Stmt> set_statement() {
    auto s = make(Stmt::Kind::set);
    const std::string first = expect_name();
    if (accept_op(".")) {
      s->targets.push_back(first);
      s->attribute = expect_name();
    } else {
      s->targets.push_back(first);
      while (accept_op(",")) s->targets.push_back(expect_name());
    }
    if (accept_op("=")) {
      s->expr = tuple_or_expression();
      expect(T::block_end, "'%}'");
      return s;
    }
    if (s->targets.size() != 1 || !s->attribute.empty()) fail("a {% set %} block assigns one name");
    s->kind = Stmt::Kind::set_block;
    while (accept_op("|")) s->filters.push_back(filter_call(nullptr));
    expect(T::block_end, "'%}'");
    s->body = statements({"endset"});
    end_tag("endset");
    return s;
  }

  void parameters(std::unique_ptr<Stmt>& s) {
    expect_op("(");
    while (!accept_op(")")) {
      const std::string name = expect_name();
      ExprPtr fallback;
      if (accept_op("=")) fallback = expression();
      s->params.emplace_back(name, std::move(fallback));
      if (!at_op(")")) expect_op(",");
    }
  }

  std::unique_ptr<Stmt> macro_block() {
    auto s = make(Stmt::Kind::macro);
    s->text = expect_name();
    parameters(s);
    expect(T::block_end, "'%}'");
    s->body = statements({"endmacro"});
    end_tag("endmacro");
    return s;
  }

  std::unique_ptr<Stmt> call_block() {
    auto s = make(Stmt::Kind::call_block);
    if (at_op("(")) parameters(s);
    s->expr = expression();
    if (s->expr->kind != Expr::Kind::call) fail("{% call %} needs a macro call");
    expect(T::block_end, "'%}'");
    s->body = statements({"endcall"});
    end_tag("endcall");
    return s;
  }

  std::unique_ptr<Stmt> filter_block() {
    auto s = make(Stmt::Kind::filter_block);
    do s->filters.push_back(filter_call(nullptr));
    while (accept_op("|"));
    expect(T::block_end, "'%}'");
    s->body = statements({"endfilter"});
    end_tag("endfilter");
    return s;
  }

  std::unique_ptr<Stmt> with_block() {
    auto s = make(Stmt::Kind::with_block);
    while (peek().type != T::block_end) {
      const std::string name = expect_name();
      expect_op("=");
      s->params.emplace_back(name, expression());
      if (peek().type != T::block_end) expect_op(",");
    }
    expect(T::block_end, "'%}'");
    s->body = statements({"endwith"});
    end_tag("endwith");
    return s;
  }

  ExprPtr node(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // `a, b` without parentheses is a tuple where jinja2 allows one ({{ }} and set).
  ExprPtr tuple_or_expression() {
    ExprPtr first = expression();
    if (!at_op(",")) return first;
    auto t = node(Expr::Kind::tuple, first->line);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().type == T::print_end || peek().type == T::block_end) break;
      t->args.push_back(expression());
    }
    return t;
  }

  // expression: a conditional (with_condition false for a for loop's iterable, whose `if` filters).
  ExprPtr expression(bool with_condition = true) {
    Nested nested(*this);
    ExprPtr e = or_expr();
    if (with_condition) {
      while (at_name("if")) {
        auto c = node(Expr::Kind::conditional, next().line);
        ExprPtr condition = or_expr();
        ExprPtr otherwise = accept_name("else") ? expression() : nullptr;
        c->args.push_back(std::move(condition));
        c->args.push_back(std::move(e));
        c->args.push_back(std::move(otherwise));
        e = std::move(c);
      }
    }
    return e;
  }

  ExprPtr logical(const char* op, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (at_name(op)) {
      auto e = node(Expr::Kind::logical, next().line);
      e->name = op;
      e->args.push_back(std::move(left));
      e->args.push_back((this->*operand)());
      left = std::move(e);
    }
    return left;
  }
  ExprPtr or_expr() { return logical("or", &Parser::and_expr); }
  ExprPtr and_expr() { return logical("and", &Parser::not_expr); }

  ExprPtr not_expr() {
    if (at_name("not")) {
      auto e = node(Expr::Kind::unary, next().line);
      e->name = "not";
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }

  ExprPtr compare() {
    ExprPtr first = math1();
    ExprPtr e;
    for (;;) {
      std::string op;
      if (peek().type == T::op && (at_op("==") || at_op("!=") || at_op("<") || at_op("<=") || at_op(">") || at_op(">="))) {
        op = next().value;
      } else if (at_name("in")) {
        ++i_;
        op = "in";
      } else if (at_name("not") && peek(1).type == T::name && peek(1).value == "in") {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!e) {
        e = node(Expr::Kind::compare, peek().line);
        e->args.push_back(std::move(first));
      }
      e->name += (e->name.empty() ? "" : " ") + op;
      e->args.push_back(math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr binary_chain(const std::set<std::string>& ops, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (peek().type == T::op && ops.count(peek().value)) {
      auto e = node(Expr::Kind::binary, peek().line);
      e->name = next().value;
      e->args.push_back(std::move(left));
      e->args.push_back((this->*operand)());
      left = std::move(e);
    }
    return left;
  }
  ExprPtr math1() { return binary_chain({"+", "-"}, &Parser::concat); }
  ExprPtr concat() { return binary_chain({"~"}, &Parser::math2); }
  ExprPtr math2() { return binary_chain({"*", "/", "//", "%"}, &Parser::power); }
  ExprPtr power() { return binary_chain({"**"}, &Parser::unary_with_filters); }

  ExprPtr unary_with_filters() { return unary(true); }

  ExprPtr unary(bool with_filter) {
    Nested nested(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      e = node(Expr::Kind::unary, peek().line);
      e->name = next().value;
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (!with_filter) return e;
    for (;;) {
      if (accept_op("|")) {
        e = filter_call(std::move(e));
      } else if (at_name("is")) {
        e = test(std::move(e));
      } else if (at_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
      e = postfix(std::move(e));
    }
  }

  ExprPtr filter_call(ExprPtr subject) {
    auto e = node(Expr::Kind::filter, peek().line);
    e->name = expect_name();
    while (accept_op(".")) e->name += "." + expect_name();
    e->args.push_back(std::move(subject));
    if (at_op("(")) arguments(*e);
    return e;
  }

  ExprPtr test(ExprPtr subject) {
    auto e = node(Expr::Kind::test, next().line);
    e->negated = accept_name("not");
    e->name = expect_name();
    e->args.push_back(std::move(subject));
    if (at_op("(")) {
      arguments(*e);
    } else if (starts_primary() && !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if")) {
      e->args.push_back(postfix(primary()));
    }
    return e;
  }

  bool starts_primary() const {
    const Token& t = peek();
    return t.type == T::name || t.type == T::string || t.type == T::integer || t.type == T::real ||
           (t.type == T::op && (t.value == "(" || t.value == "[" || t.value == "{"));
  }

  void arguments(Expr& e) {
    expect_op("(");
    while (!accept_op(")")) {
      if (peek().type == T::name && peek(1).type == T::op && peek(1).value == "=") {
        std::string name = next().value;
        ++i_;
        e.keyword.emplace_back(std::move(name), expression());
      } else {
        if (!e.keyword.empty()) fail("a positional argument follows a keyword argument");
        e.args.push_back(expression());
      }
      if (!at_op(")")) expect_op(",");
    }
  }

  ExprPtr call(ExprPtr callee) {
    auto e = node(Expr::Kind::call, peek().line);
    e->args.push_back(std::move(callee));
    arguments(*e);
    return e;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (at_op(".")) {
        auto a = node(Expr::Kind::attribute, next().line);
        if (peek().type == T::integer) a->name = next().value;
        else a->name = expect_name();
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (at_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        int colons = 0;
        for (;;) {
          if (at_op("]")) break;
          if (accept_op(":")) {
            if (++colons > 2) fail("a slice has at most two ':'");
            continue;
          }
          if (parts[colons]) fail("expected ']' or ':' in a subscript");
          parts[colons] = expression();
        }
        expect_op("]");
        if (colons == 0) {
          if (!parts[0]) fail("an empty subscript []");
          auto s = node(Expr::Kind::subscript, line);
          s->args.push_back(std::move(e));
          s->args.push_back(std::move(parts[0]));
          e = std::move(s);
        } else {
          auto s = node(Expr::Kind::slice, line);
          s->args.push_back(std::move(e));
          for (auto& part : parts) s->args.push_back(std::move(part));
          e = std::move(s);
        }
      } else if (at_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr primary() {
    const Token& t = peek();
    auto e = node(Expr::Kind::literal, t.line);
    switch (t.type) {
      case T::name: {
        const std::string name = next().value;
        if (name == "true" || name == "True") e->value = Value(true);
        else if (name == "false" || name == "False") e->value = Value(false);
        else if (name == "none" || name == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::name;
          e->name = name;
        }
        return e;
      }
      case T::string: {
        std::string text;
        while (peek().type == T::string) text += next().value;  // adjacent literals join
        e->value = Value(text);
        return e;
      }
      case T::integer:
        try {
          e->value = Value(int64_t(std::stoll(next().value)));
        } catch (const std::out_of_range&) {
          fail("an integer literal beyond 64 bits");
        }
        return e;
      case T::real: e->value = Value(std::stod(next().value)); return e;
      case T::op:
        if (accept_op("(")) {
          if (accept_op(")")) {
            e->kind = Expr::Kind::tuple;
            return e;
          }
          ExprPtr first = expression();
          if (!at_op(",")) {
            expect_op(")");
            return first;
          }
          e->kind = Expr::Kind::tuple;
          e->args.push_back(std::move(first));
          while (accept_op(",")) {
            if (at_op(")")) break;
            e->args.push_back(expression());
          }
          expect_op(")");
          return e;
        }
        if (accept_op("[")) {
          e->kind = Expr::Kind::list;
          while (!accept_op("]")) {
            e->args.push_back(expression());
            if (!at_op("]")) expect_op(",");
          }
          return e;
        }
        if (accept_op("{")) {
          e->kind = Expr::Kind::dict;
          while (!accept_op("}")) {
            e->args.push_back(expression());
            expect_op(":");
            e->args.push_back(expression());
            if (!at_op("}")) expect_op(",");
          }
          return e;
        }
        break;
      default: break;
    }
    fail("expected an expression, found " + describe(t));
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse(); }

}  // namespace ds::jinja
