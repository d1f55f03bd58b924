#pragma once
// JSON Schema to GBNF, for response_format json_schema (and json_object, the
// schema {}): what the grammar enforces, the output satisfies.
//
// Enforced: type (one or several), enum, const, properties / required /
// additionalProperties (false, true or a schema; properties come in the
// schema's order, each optional one may be left out) / minProperties /
// maxProperties, items / prefixItems / minItems / maxItems, anyOf, oneOf (as
// anyOf: a value matching two branches is not excluded), allOf of one schema,
// $ref into #/$defs or #/definitions (recursion allowed), minimum / maximum /
// exclusiveMinimum / exclusiveMaximum on integers and numbers
// (grammar/number_range.h), string minLength / maxLength (in code points) /
// pattern (a regex subset: literals, escapes, \d \w \s \D \W \S, classes, .,
// groups, |, * + ? {m,n}, ^ $) / format (grammar/string_formats.h).
// Annotations (title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly) constrain nothing.
// Any other keyword is refused with an error naming it and where it is,
// rather than produce output the schema would reject.

#include <string>

#include "base/status.h"
#include "template/jinja_value.h"

namespace ds::grammar {

// The whole grammar: root is one value the schema admits, with whitespace around.
Result<std::string> json_schema_to_gbnf(const jinja::Value& schema);

// The rules of one schema (names prefixed, so several schemas can share a
// grammar, as tool calls' arguments do) and the rule for its value; they
// refer to json_primitives(), which a grammar includes once.
struct SchemaRules {
  std::string rules;
  std::string value;
};
Result<SchemaRules> json_schema_rules(const jinja::Value& schema, const std::string& prefix);
const char* json_primitives();

// Whether a schema keyword is an annotation (title, description, ...: above), which constrains nothing.
bool is_schema_annotation(const std::string& key);

// A GBNF literal that matches exactly the bytes of `text`.
std::string gbnf_literal(const std::string& text);

}  // namespace ds::grammar
