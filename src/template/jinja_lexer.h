#pragma once
// Splits a Jinja template into text and the tokens of its {{ }} and {% %}
// tags, applying whitespace control as jinja2 does with transformers'
// settings: trim_blocks (the newline after a block tag goes), lstrip_blocks
// (the indentation before one goes), {%- / -%} (all whitespace on that side
// goes), {%+ (keeps it). Newlines are normalised to \n and one trailing
// newline of the source dropped, as jinja2's keep_trailing_newline=False.

#include <string>
#include <vector>

namespace ds::jinja {

struct Token {
  enum class Type { text, print_begin, print_end, block_begin, block_end, name, string, integer, real, op, end };
  Type type;
  std::string value;
  int line;
};

// Throws TemplateError (with the line) for an unterminated tag or string.
std::vector<Token> lex_template(const std::string& source);

}  // namespace ds::jinja
