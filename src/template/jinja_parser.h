#pragma once
// Parses the tokens of a template into statements, with jinja2's operator
// precedence. Throws TemplateError naming the line and what was expected.

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace ds::jinja {

Body parse_template(const std::vector<Token>& tokens);

}  // namespace ds::jinja
