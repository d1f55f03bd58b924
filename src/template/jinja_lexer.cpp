#include "template/jinja_lexer.h"

#include <cctype>
#include <cstring>

#include "template/jinja_value.h"
#include "tokenizer/utf8.h"

namespace ds::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

const char* const k_operators[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                   ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      const size_t tag = next_tag(pos_);
      std::string text = s_.substr(pos_, tag - pos_);
      if (tag == s_.size()) {
        emit(Token::Type::text, text);
        break;
      }
      const char kind = s_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < s_.size() ? s_[tag + 2] : 0;
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: indentation alone on the tag's line goes.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (line_start > 0 || line_starting) {
          bool blank = line_start < text.size();
          for (size_t i = line_start; i < text.size(); ++i) blank = blank && is_space(text[i]);
          if (blank) text.resize(line_start);
        }
      }
      emit(Token::Type::text, text);
      advance_to(tag + 2 + (sign == '-' || sign == '+'));
      if (kind == '#') comment();
      else tag_body(kind == '{');
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Type::end, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t next_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  void advance_to(size_t to) {
    for (; pos_ < to; ++pos_) line_ += s_[pos_] == '\n';
  }

  void emit(Token::Type type, std::string value) {
    if (type == Token::Type::text && value.empty()) return;
    const int line = line_;
    tokens_.push_back({type, std::move(value), line});
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError("line " + std::to_string(line_) + ": " + what);
  }

  // After a block tag (or comment) ends: -%} eats all following whitespace, %} one newline.
  void after_block_end(bool strip) {
    if (strip) {
      size_t end = pos_;
      while (end < s_.size() && is_space(s_[end])) ++end;
      advance_to(end);
    } else if (pos_ < s_.size() && s_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
  }

  void comment() {
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail("a comment {# is never closed");
    const bool strip = end > pos_ && s_[end - 1] == '-';
    const bool keep = end > pos_ && s_[end - 1] == '+';
    advance_to(end + 2);
    if (!keep) after_block_end(strip);
  }

  void tag_body(bool print) {
    emit(print ? Token::Type::print_begin : Token::Type::block_begin, "");
    int depth = 0;
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= s_.size()) fail(print ? "a {{ is never closed" : "a {% is never closed");
      const char* close = print ? "}}" : "%}";
      if (depth == 0) {
        const bool strip = s_[pos_] == '-' && s_.compare(pos_ + 1, 2, close) == 0;
        const bool keep = !print && s_[pos_] == '+' && s_.compare(pos_ + 1, 2, close) == 0;
        if (strip || keep || s_.compare(pos_, 2, close) == 0) {
          advance_to(pos_ + 2 + (strip || keep));
          emit(print ? Token::Type::print_end : Token::Type::block_end, "");
          if (print) {
            if (strip) after_block_end(true);
          } else if (!keep) {
            after_block_end(strip);
          }
          return;
        }
      }
      const char c = s_[pos_];
      if (std::isalpha(uint8_t(c)) || c == '_') {
        size_t end = pos_;
        while (end < s_.size() && (std::isalnum(uint8_t(s_[end])) || s_[end] == '_')) ++end;
        emit(Token::Type::name, s_.substr(pos_, end - pos_));
        advance_to(end);
      } else if (std::isdigit(uint8_t(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        bool matched = false;
        for (const char* op : k_operators) {
          if (s_.compare(pos_, std::strlen(op), op) == 0) {
            if (*op == '(' || *op == '[' || *op == '{') ++depth;
            if (*op == ')' || *op == ']' || *op == '}') --depth;
            emit(Token::Type::op, op);
            advance_to(pos_ + std::strlen(op));
            matched = true;
            break;
          }
        }
        if (!matched) fail(std::string("unexpected character '") + c + "' in a tag");
      }
    }
  }

  void number() {
    size_t end = pos_;
    bool real = false;
    auto digits = [&] {
      while (end < s_.size() && (std::isdigit(uint8_t(s_[end])) || s_[end] == '_')) ++end;
    };
    digits();
    if (end + 1 < s_.size() && s_[end] == '.' && std::isdigit(uint8_t(s_[end + 1]))) {
      real = true;
      ++end;
      digits();
    }
    if (end < s_.size() && (s_[end] == 'e' || s_[end] == 'E')) {
      size_t e = end + 1;
      if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
      if (e < s_.size() && std::isdigit(uint8_t(s_[e]))) {
        real = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i) {
      if (s_[i] != '_') text += s_[i];
    }
    emit(real ? Token::Type::real : Token::Type::integer, text);
    advance_to(end);
  }

  // Python's escapes, as jinja2 decodes string literals; an unknown escape stays as written.
  void string_literal(char quote) {
    std::string value;
    size_t i = pos_ + 1;
    for (;; ++i) {
      if (i >= s_.size()) fail("a string literal is never closed");
      const char c = s_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= s_.size()) {
        value += c;
        continue;
      }
      const char e = s_[++i];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '0': value += '\0'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n >= s_.size()) fail("a truncated \\" + std::string(1, e) + " escape");
          const uint32_t codepoint = uint32_t(std::stoul(s_.substr(i + 1, n), nullptr, 16));
          append_utf8(value, codepoint);
          i += n;
          break;
        }
        default: value += '\\', value += e;
      }
    }
    emit(Token::Type::string, value);
    advance_to(i + 1);
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace ds::jinja
