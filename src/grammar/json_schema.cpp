#include "grammar/json_schema.h"

#include <bitset>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "grammar/number_range.h"
#include "grammar/string_formats.h"

namespace ds::grammar {
namespace {

using jinja::Dict;
using jinja::Value;

// JSON text between values: bounded, so whitespace cannot run on forever.
const char* const k_primitives = R"(ws ::= [ \t\n]{0,8}
json-raw-char ::= [\x20-\x21\x23-\x5b\x5d-\x7f] | [\u0080-\ud7ff] | [\ue000-\U0010ffff]
json-char ::= json-raw-char | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws (json-string ws ":" ws json-value ws ("," ws json-string ws ":" ws json-value ws)*)? "}"
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
)";

const std::set<std::string> k_annotations = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                             "deprecated", "readOnly", "writeOnly"};


std::string json_text(const Value& v) { return jinja::to_json(v, std::nullopt, std::nullopt, false); }

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::runtime_error("json_schema" + (path.empty() ? std::string() : " at " + path) + ": " + what);
}

// Sets of ASCII characters, for the classes a pattern negates.
using AsciiSet = std::bitset<128>;

// What a JSON string holds unescaped of ASCII: the printable characters but '"' and '\'.
AsciiSet raw_ascii() {
  AsciiSet set;
  for (int c = 0x20; c < 0x80; ++c) set[size_t(c)] = c != '"' && c != '\\';
  return set;
}

AsciiSet ascii_range(char from, char to) {
  AsciiSet set;
  for (int c = from; c <= to; ++c) set[size_t(c)] = true;
  return set;
}

AsciiSet digits() { return ascii_range('0', '9'); }
AsciiSet word_characters() { return ascii_range('a', 'z') | ascii_range('A', 'Z') | digits() | ascii_range('_', '_'); }

// A GBNF class of exactly `set` (never empty), each character as \xHH.
std::string ascii_class(const AsciiSet& set) {
  std::string out = "[";
  for (int c = 0; c < 128;) {
    if (!set[size_t(c)]) {
      ++c;
      continue;
    }
    int end = c;
    while (end + 1 < 128 && set[size_t(end + 1)]) ++end;
    char range[16];
    std::snprintf(range, sizeof range, end > c ? "\\x%02x-\\x%02x" : "\\x%02x", c, end);
    out += range;
    c = end + 1;
  }
  return out + "]";
}

// A regex (the subset of ECMA-262 patterns schemas use) as GBNF over the
// characters of a JSON string's contents. Where a pattern's character may be
// anything but some (., \D, \W, \S, [^...]), only characters JSON holds
// unescaped are written: any code point for '.', ASCII for the rest (Python's
// \D, \W and \S also leave out other scripts' digits, letters and spaces).
class PatternConverter {
 public:
  PatternConverter(const std::string& pattern, const std::string& path) : p_(pattern), path_(path) {}

  std::string convert() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') anchored_start = true, ++i_;
    std::string body = alternation(0);
    if (i_ < p_.size()) fail("unbalanced ')'");
    anchored_end = ended_;
    std::string out;
    if (!anchored_start) out += "json-char* ";
    out += "(" + body + ")";
    if (!anchored_end) out += " json-char*";
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) { refuse(path_, "pattern '" + p_ + "': " + what); }

  std::string alternation(int depth) {
    if (depth > 32) fail("groups nest too deeply");
    std::string out = sequence(depth);
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      out += " | " + sequence(depth);
    }
    return out;
  }

  std::string sequence(int depth) {
    std::string out;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        ++i_;
        if (i_ != p_.size() || depth != 0) fail("'$' only at the end");
        ended_ = true;
        break;
      }
      std::string atom = this->atom(depth);
      atom += quantifier();
      out += (out.empty() ? "" : " ") + atom;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantifier() {
    if (i_ >= p_.size()) return "";
    const char c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') fail("lazy quantifiers are not supported");
      return std::string(1, c);
    }
    if (c == '{') {
      const size_t close = p_.find('}', i_);
      if (close == std::string::npos) fail("an unclosed {");
      const std::string inside = p_.substr(i_ + 1, close - i_ - 1);
      for (const char d : inside) {
        if (!std::isdigit(uint8_t(d)) && d != ',') fail("a bad {m,n}");
      }
      i_ = close + 1;
      return "{" + inside + "}";
    }
    return "";
  }

  std::string atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (p_.compare(i_, 2, "?:") == 0) i_ += 2;
      else if (i_ < p_.size() && p_[i_] == '?') fail("lookarounds and named groups are not supported");
      std::string inner = alternation(depth + 1);
      if (i_ >= p_.size() || p_[i_] != ')') fail("an unclosed (");
      ++i_;
      return "(" + inner + ")";
    }
    if (c == '[') return char_class();
    if (c == '.') {  // any character but a line break: those JSON would escape are left out
      ++i_;
      return "json-raw-char";
    }
    if (c == '\\') return escape(false);
    if (c == '*' || c == '+' || c == '?' || c == '{') fail(std::string("nothing to repeat before '") + c + "'");
    // A literal character; multi-byte UTF-8 stays whole.
    size_t n = 1;
    while (i_ + n < p_.size() && (uint8_t(p_[i_ + n]) & 0xC0) == 0x80) ++n;
    const std::string ch = p_.substr(i_, n);
    i_ += n;
    if (ch == "\"") return "\"\\\\\\\"\"";
    return gbnf_literal(ch);
  }

  // \d \w \s and escaped characters; in a class, the class body text.
  std::string escape(bool in_class) {
    ++i_;
    if (i_ >= p_.size()) fail("a trailing backslash");
    const char e = p_[i_++];
    const char* body = nullptr;
    switch (e) {
      case 'd': body = "0-9"; break;
      case 'w': body = "a-zA-Z0-9_"; break;
      case 's': body = " "; break;  // JSON contents hold whitespace escaped; a plain space is what stays literal
      case 'D':
      case 'W':
      case 'S': {
        if (in_class) fail(std::string("\\") + e + " inside [...] is not supported");
        return ascii_class(raw_ascii() & ~(e == 'D' ? digits() : e == 'W' ? word_characters() : ascii_range(' ', ' ')));
      }
      case 'b':
      case 'B': fail(std::string("\\") + e + " is not supported");
      case 'n': return in_class ? "" : "\"\\\\n\"";
      case 't': return in_class ? "" : "\"\\\\t\"";
      default: {
        const std::string ch(1, e);
        if (in_class) return (e == ']' || e == '\\' || e == '^' || e == '-') ? "\\" + ch : ch;
        if (e == '"') return "\"\\\\\\\"\"";
        return gbnf_literal(ch);
      }
    }
    return in_class ? body : "[" + std::string(body) + "]";
  }

  std::string char_class() {
    ++i_;
    if (i_ < p_.size() && p_[i_] == '^') {
      ++i_;
      return negated_class();
    }
    std::string body;
    while (i_ < p_.size() && p_[i_] != ']') {
      if (p_[i_] == '\\') {
        body += escape(true);
      } else {
        const char c = p_[i_++];
        if (c == '"') fail("'\"' in a character class is not supported");
        if (c == '[') body += "\\[";
        else body += c;
      }
    }
    if (i_ >= p_.size()) fail("an unclosed [");
    ++i_;
    return "[" + body + "]";
  }

  // [^...]: the ASCII JSON holds unescaped, less the class's characters.
  std::string negated_class() {
    AsciiSet excluded;
    while (i_ < p_.size() && p_[i_] != ']') {
      char c = p_[i_++];
      if (uint8_t(c) >= 0x80) fail("a character past ASCII in a negated class is not supported");
      if (c == '\\') {
        if (i_ >= p_.size()) fail("a trailing backslash");
        const char e = p_[i_++];
        if (e == 'd' || e == 'w' || e == 's') {
          excluded |= e == 'd' ? digits() : e == 'w' ? word_characters() : ascii_range(' ', ' ');
          continue;
        }
        if (std::isalnum(uint8_t(e)) && e != 'n' && e != 't') fail(std::string("\\") + e + " in a negated class is not supported");
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
      }
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        const char to = p_[i_ + 1];
        if (uint8_t(to) >= 0x80 || to == '\\' || to < c) fail("a bad range in a negated class");
        i_ += 2;
        excluded |= ascii_range(c, to);
      } else {
        excluded[size_t(c)] = true;
      }
    }
    if (i_ >= p_.size()) fail("an unclosed [");
    ++i_;
    const AsciiSet left = raw_ascii() & ~excluded;
    if (left.none()) fail("the negated class leaves no character");
    return ascii_class(left);
  }

  const std::string& p_;
  const std::string& path_;
  size_t i_ = 0;
  bool ended_ = false;
};

class SchemaConverter {
 public:
  SchemaConverter(const Value& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  SchemaRules convert() {
    SchemaRules out;
    out.value = visit(root_, "value", "");
    for (const auto& [name, body] : rules_) out.rules += name + " ::= " + body + "\n";
    return out;
  }

 private:
  std::string add_rule(const std::string& hint, const std::string& body) {
    std::string name = prefix_ + hint;
    for (char& c : name) {
      if (!std::isalnum(uint8_t(c)) && c != '-') c = '-';
    }
    if (rules_.count(name)) name += "-" + std::to_string(++counter_);
    rules_[name] = body;
    if (rules_.size() > 10'000) refuse("", "the schema makes more than 10,000 rules");
    return name;
  }

  const Value* field(const Dict& d, const char* key) {
    const Value* v = d.find(key);
    return v && !v->is_undefined() ? v : nullptr;
  }

  int64_t count_field(const Dict& d, const char* key, const std::string& path) {
    const Value* v = field(d, key);
    if (!v) return -1;
    if (!v->is_int() || v->as_int() < 0 || v->as_int() > 1000) refuse(path, std::string("'") + key + "' must be an integer 0..1000");
    return v->as_int();
  }

  std::string resolve_ref(const std::string& ref, const std::string& path) {
    const auto known = refs_.find(ref);
    if (known != refs_.end()) return known->second;
    std::string rest;
    if (ref.rfind("#/$defs/", 0) == 0) rest = ref.substr(8);
    else if (ref.rfind("#/definitions/", 0) == 0) rest = ref.substr(14);
    else refuse(path, "$ref '" + ref + "': only #/$defs/NAME and #/definitions/NAME are supported");
    const char* container = ref.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    const Value* defs = root_.is_dict() ? field(root_.as_dict(), container) : nullptr;
    const Value* target = defs && defs->is_dict() ? defs->as_dict().find(rest) : nullptr;
    if (!target) refuse(path, "$ref '" + ref + "' names nothing");
    // Named before it is visited, so a recursive reference finds it.
    std::string name = prefix_ + "ref-" + rest;
    for (char& c : name) {
      if (!std::isalnum(uint8_t(c)) && c != '-') c = '-';
    }
    while (rules_.count(name)) name += "-" + std::to_string(++counter_);
    rules_[name] = "";
    refs_[ref] = name;
    rules_[name] = visit(*target, name + "-value", ref);
    return name;
  }

  std::string visit(const Value& schema, const std::string& hint, const std::string& path) {
    if (++depth_ > 64) refuse(path, "the schema nests deeper than 64 levels");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (schema.is_bool()) {
      if (!schema.as_bool()) refuse(path, "the schema false admits no value");
      return "json-value";
    }
    if (!schema.is_dict()) refuse(path, "a schema must be an object or a boolean");
    const Dict& d = schema.as_dict();
    static const std::set<std::string> known = {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
        "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minProperties", "maxProperties"};
    for (const auto& [key, value] : d.items) {
      if (!known.count(key) && !is_schema_annotation(key)) refuse(path, "'" + key + "' is not supported");
    }
    if (const Value* ref = field(d, "$ref")) {
      if (!ref->is_string()) refuse(path, "$ref must be a string");
      return resolve_ref(ref->as_string(), path + "/$ref");
    }
    if (const Value* c = field(d, "const")) return gbnf_literal(json_text(*c));
    if (const Value* e = field(d, "enum")) {
      if (!e->is_list() || e->as_list().empty()) refuse(path, "'enum' must be a non-empty array");
      std::string body;
      for (const Value& v : e->as_list()) body += (body.empty() ? "" : " | ") + gbnf_literal(json_text(v));
      return "(" + body + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const Value* branches = field(d, key)) {
        if (!branches->is_list() || branches->as_list().empty()) refuse(path, std::string("'") + key + "' must be a non-empty array");
        std::string body;
        for (size_t i = 0; i < branches->as_list().size(); ++i) {
          body += (body.empty() ? "" : " | ") +
                  visit(branches->as_list()[i], hint + "-" + std::to_string(i), path + "/" + key + "/" + std::to_string(i));
        }
        return add_rule(hint, body);
      }
    }
    if (const Value* all = field(d, "allOf")) {
      if (!all->is_list() || all->as_list().size() != 1) refuse(path, "'allOf' is supported with exactly one schema");
      return visit(all->as_list()[0], hint, path + "/allOf/0");
    }
    const Value* type = field(d, "type");
    if (!type) {
      if (field(d, "properties") || field(d, "minProperties") || field(d, "maxProperties")) return object(d, hint, path);
      if (field(d, "minimum") || field(d, "maximum") || field(d, "exclusiveMinimum") || field(d, "exclusiveMaximum")) {
        return number(d, "number", hint, path);
      }
      if (field(d, "items") || field(d, "prefixItems")) return array(d, hint, path);
      if (field(d, "minLength") || field(d, "maxLength") || field(d, "pattern") || field(d, "format")) return string(d, hint, path);
      return "json-value";
    }
    if (type->is_list()) {
      std::string body;
      for (const Value& t : type->as_list()) {
        if (!t.is_string()) refuse(path, "'type' must hold strings");
        body += (body.empty() ? "" : " | ") + typed(t.as_string(), d, hint + "-" + t.as_string(), path);
      }
      return add_rule(hint, body);
    }
    if (!type->is_string()) refuse(path, "'type' must be a string or an array of strings");
    return typed(type->as_string(), d, hint, path);
  }

  std::string typed(const std::string& type, const Dict& d, const std::string& hint, const std::string& path) {
    if (type == "object") return object(d, hint, path);
    if (type == "array") return array(d, hint, path);
    if (type == "string") return string(d, hint, path);
    if (type == "integer" || type == "number") return number(d, type, hint, path);
    if (type == "boolean") return "json-boolean";
    if (type == "null") return "json-null";
    refuse(path, "unknown type '" + type + "'");
  }

  // An integer or a number, within minimum / maximum / exclusiveMinimum / exclusiveMaximum where given.
  std::string number(const Dict& d, const std::string& type, const std::string& hint, const std::string& path) {
    std::optional<Bound> low, high;
    for (const auto& [key, exclusive, is_low] : {std::tuple{"minimum", false, true}, {"exclusiveMinimum", true, true},
                                                  {"maximum", false, false}, {"exclusiveMaximum", true, false}}) {
      const Value* v = field(d, key);
      if (!v) continue;
      if (!v->is_int() && !v->is_real()) refuse(path, std::string("'") + key + "' must be a number");
      std::optional<Bound>& side = is_low ? low : high;
      // Both the inclusive and the exclusive bound on a side: the tighter one (the exclusive where equal).
      const bool tighter = !side || (is_low ? v->as_real() > side->value.as_real() : v->as_real() < side->value.as_real()) ||
                           (v->as_real() == side->value.as_real() && exclusive);
      if (tighter) side = Bound{*v, exclusive};
    }
    if (!low && !high) return type == "integer" ? "json-integer" : "json-number";
    auto body = type == "integer" ? integer_range_gbnf(low, high) : number_range_gbnf(low, high);
    if (!body.ok()) refuse(path, body.message());
    return add_rule(hint, body.value());
  }

  std::string string(const Dict& d, const std::string& hint, const std::string& path) {
    const Value* pattern = field(d, "pattern");
    const Value* format = field(d, "format");
    const int64_t min = count_field(d, "minLength", path), max = count_field(d, "maxLength", path);
    if (pattern && (min >= 0 || max >= 0)) refuse(path, "'pattern' together with minLength/maxLength is not supported");
    if (format && (pattern || min >= 0 || max >= 0)) refuse(path, "'format' together with other string keywords is not supported");
    if (pattern) {
      if (!pattern->is_string()) refuse(path, "'pattern' must be a string");
      return add_rule(hint, "\"\\\"\" " + PatternConverter(pattern->as_string(), path).convert() + " \"\\\"\"");
    }
    if (format) {
      if (!format->is_string()) refuse(path, "'format' must be a string");
      const std::optional<std::string> contents = string_format_gbnf(format->as_string());
      if (!contents) refuse(path, "format '" + format->as_string() + "' is not supported (" + supported_string_formats() + " are)");
      return add_rule(hint, "\"\\\"\" " + *contents + " \"\\\"\"");
    }
    if (min < 0 && max < 0) return "json-string";
    if (max >= 0 && min > max) refuse(path, "minLength exceeds maxLength");
    return add_rule(hint, "\"\\\"\" json-char{" + std::to_string(std::max<int64_t>(min, 0)) + "," + (max >= 0 ? std::to_string(max) : "") +
                              "} \"\\\"\"");
  }

  std::string array(const Dict& d, const std::string& hint, const std::string& path) {
    const int64_t min = count_field(d, "minItems", path), max = count_field(d, "maxItems", path);
    if (max >= 0 && min > max) refuse(path, "minItems exceeds maxItems");
    std::vector<std::string> prefix;
    if (const Value* p = field(d, "prefixItems")) {
      if (!p->is_list()) refuse(path, "'prefixItems' must be an array");
      for (size_t i = 0; i < p->as_list().size(); ++i) {
        prefix.push_back(visit(p->as_list()[i], hint + "-" + std::to_string(i), path + "/prefixItems/" + std::to_string(i)));
      }
    }
    const Value* items = field(d, "items");
    std::string item = "json-value";
    bool more = true;
    if (items && items->is_bool() && !items->as_bool()) more = false;
    else if (items) item = visit(*items, hint + "-item", path + "/items");
    // Elements: the prefix in order, then items; each beyond the minimum may be left out.
    const int64_t n_min = std::max<int64_t>(min, 0);
    std::vector<std::string> slots;  // one per possible element, the last "*" for unbounded
    const int64_t bound = max >= 0 ? max : -1;
    for (size_t i = 0; i < prefix.size() && (bound < 0 || int64_t(i) < bound); ++i) slots.push_back(prefix[i]);
    if (more) {
      if (bound < 0) {
        while (int64_t(slots.size()) < n_min) slots.push_back(item);
        slots.push_back(item + "*");
      } else {
        while (int64_t(slots.size()) < bound) slots.push_back(item);
      }
    }
    if (int64_t(slots.size()) < n_min && !(slots.size() && slots.back().back() == '*')) refuse(path, "minItems cannot be met");
    // R_k: the elements from slot k on, given that k elements were written.
    std::string next = "\"\"";
    for (int64_t k = int64_t(slots.size()) - 1; k >= 0; --k) {
      const bool repeat = slots[size_t(k)].back() == '*';
      const std::string element = repeat ? slots[size_t(k)].substr(0, slots[size_t(k)].size() - 1) : slots[size_t(k)];
      const std::string sep = k == 0 ? "" : "\",\" ws ";
      std::string body;
      if (repeat) {
        body = k == 0 ? "(" + element + " ws (\",\" ws " + element + " ws)*)" : "(\",\" ws " + element + " ws)*";
      } else {
        body = sep + element + " ws " + next;
      }
      const bool optional = k >= n_min;
      next = add_rule(hint + "-from-" + std::to_string(k), optional && !repeat ? body + " | \"\"" : repeat && k == 0 && n_min == 0 ? body + " | \"\"" : body);
    }
    return add_rule(hint, "\"[\" ws " + next + " \"]\"");
  }

  std::string object(const Dict& d, const std::string& hint, const std::string& path) {
    std::vector<std::pair<std::string, std::string>> props;  // key literal, value rule
    std::vector<bool> required;
    std::set<std::string> required_names;
    if (const Value* r = field(d, "required")) {
      if (!r->is_list()) refuse(path, "'required' must be an array");
      for (const Value& name : r->as_list()) {
        if (!name.is_string()) refuse(path, "'required' must hold strings");
        required_names.insert(name.as_string());
      }
    }
    if (const Value* p = field(d, "properties")) {
      if (!p->is_dict()) refuse(path, "'properties' must be an object");
      for (const auto& [key, sub] : p->as_dict().items) {
        props.emplace_back(gbnf_literal(json_text(Value(key))), visit(sub, hint + "-" + key, path + "/properties/" + key));
        required.push_back(required_names.count(key) > 0);
      }
    }
    for (const std::string& name : required_names) {
      bool listed = false;
      for (const auto& [key, sub] : props) listed = listed || key == gbnf_literal(json_text(Value(name)));
      if (!listed) refuse(path, "required property '" + name + "' is not among the properties");
    }
    // The rule for one additional key-value, where extras are allowed. Beside
    // listed properties none is generated: an extra key could repeat a listed
    // one with another type, which a grammar cannot cheaply exclude.
    std::string extra;
    const Value* additional = field(d, "additionalProperties");
    if (!props.empty()) {
      if (additional && !additional->is_bool() && !additional->is_dict()) refuse(path, "'additionalProperties' must be a boolean or a schema");
    } else if (!additional || (additional->is_bool() && additional->as_bool())) extra = "json-string ws \":\" ws json-value ws";
    else if (additional->is_dict()) extra = "json-string ws \":\" ws " + visit(*additional, hint + "-extra", path + "/additionalProperties") + " ws";
    else if (!additional->is_bool()) refuse(path, "'additionalProperties' must be a boolean or a schema");
    const int64_t min_properties = count_field(d, "minProperties", path), max_properties = count_field(d, "maxProperties", path);
    if (max_properties >= 0 && min_properties > max_properties) refuse(path, "minProperties exceeds maxProperties");
    if (min_properties >= 0 || max_properties >= 0) {
      return counted_object(props, required, extra, std::max<int64_t>(min_properties, 0), max_properties, hint, path);
    }
    // R(i, written): the properties from i on, given whether one was written (a comma is due).
    std::string after[2];
    for (int written = 0; written < 2; ++written) {
      if (extra.empty()) after[written] = "\"\"";
      else after[written] = add_rule(hint + "-extra-" + std::to_string(written),
                                     written ? "(\",\" ws " + extra + ")*" : "(" + extra + " (\",\" ws " + extra + ")*)?");
    }
    for (int64_t i = int64_t(props.size()) - 1; i >= 0; --i) {
      std::string next[2];
      for (int written = 0; written < 2; ++written) {
        const std::string kv = std::string(written ? "\",\" ws " : "") + props[size_t(i)].first + " ws \":\" ws " +
                               props[size_t(i)].second + " ws " + after[1];
        const std::string body = required[size_t(i)] ? kv : kv + " | " + after[written];
        next[written] = add_rule(hint + "-" + std::to_string(i) + "-" + std::to_string(written), body);
      }
      after[0] = next[0];
      after[1] = next[1];
    }
    return add_rule(hint, "\"{\" ws " + after[0] + " \"}\"");
  }

  // An object under minProperties / maxProperties (max < 0: none): the listed
  // properties counted as they are written, or, with none listed, the extras.
  std::string counted_object(const std::vector<std::pair<std::string, std::string>>& props, const std::vector<bool>& required,
                             const std::string& extra, int64_t min, int64_t max, const std::string& hint, const std::string& path) {
    if (props.empty()) {
      if (extra.empty()) {
        if (min > 0) refuse(path, "minProperties cannot be met: no property is allowed");
        return "\"{\" ws \"}\"";
      }
      if (max == 0) return "\"{\" ws \"}\"";
      const std::string more = "(\",\" ws " + extra + "){" + std::to_string(std::max<int64_t>(min, 1) - 1) + "," +
                               (max > 0 ? std::to_string(max - 1) : "") + "}";
      const std::string body = extra + " " + more;
      return add_rule(hint, "\"{\" ws " + (min == 0 ? "(" + body + ")?" : body) + " \"}\"");
    }
    const int64_t n = int64_t(props.size()), cap = max >= 0 ? std::min(max, n) : n;
    int64_t n_required = 0;
    for (bool r : required) n_required += r;
    if (min > n) refuse(path, "minProperties " + std::to_string(min) + " cannot be met with " + std::to_string(n) + " properties listed (extras are not generated beside them)");
    if (n_required > cap) refuse(path, "maxProperties is below the required properties' count");
    // R(i, k): the properties from i on, given that k were written; nullopt where none can end the object.
    std::vector<std::optional<std::string>> after(size_t(cap) + 1);
    for (int64_t k = 0; k <= cap; ++k) after[size_t(k)] = k >= min ? std::optional<std::string>("\"\"") : std::nullopt;
    for (int64_t i = n - 1; i >= 0; --i) {
      std::vector<std::optional<std::string>> next(size_t(cap) + 1);
      for (int64_t k = 0; k <= std::min(i, cap); ++k) {
        std::vector<std::string> ways;
        if (k < cap && after[size_t(k + 1)]) {
          ways.push_back(std::string(k > 0 ? "\",\" ws " : "") + props[size_t(i)].first + " ws \":\" ws " + props[size_t(i)].second + " ws " +
                         *after[size_t(k + 1)]);
        }
        if (!required[size_t(i)] && after[size_t(k)]) ways.push_back(*after[size_t(k)]);
        if (ways.empty()) continue;
        std::string body = ways[0];
        for (size_t w = 1; w < ways.size(); ++w) body += " | " + ways[w];
        next[size_t(k)] = add_rule(hint + "-" + std::to_string(i) + "-" + std::to_string(k), body);
      }
      after = std::move(next);
    }
    if (!after[0]) refuse(path, "minProperties / maxProperties cannot be met");
    return add_rule(hint, "\"{\" ws " + *after[0] + " \"}\"");
  }

  const Value& root_;
  const std::string prefix_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  int counter_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<SchemaRules> json_schema_rules(const Value& schema, const std::string& prefix) {
  try {
    return SchemaConverter(schema, prefix).convert();
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
}

const char* json_primitives() { return k_primitives; }

bool is_schema_annotation(const std::string& key) { return k_annotations.count(key) > 0; }

std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}


Result<std::string> json_schema_to_gbnf(const Value& schema) {
  auto rules = json_schema_rules(schema, "schema-");
  if (!rules.ok()) return rules.status();
  return std::string(k_primitives) + rules.value().rules + "root ::= ws " + rules.value().value + " ws\n";
}

}  // namespace ds::grammar
