#include "template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"

namespace ds::jinja {
namespace {

// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string repr_string(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (const unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == quote) out += std::string("\\") + char(quote);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  return out + quote;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (const unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          out += hex;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  std::optional<int> indent;
  std::string item_separator, key_separator;
  bool sort_keys;
  std::string out;

  void newline(int depth) {
    out += '\n';
    out.append(size_t(*indent) * size_t(depth), ' ');
  }

  void write(const Value& v, int depth) {
    if (depth > 512) throw TemplateError("tojson: nested too deeply");
    switch (v.kind()) {
      case Value::Kind::none: out += "null"; return;
      case Value::Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::integer: out += std::to_string(v.as_int()); return;
      case Value::Kind::real: {
        const double d = v.as_real();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : format_float(d);
        return;
      }
      case Value::Kind::string: json_string(v.as_string(), out); return;
      case Value::Kind::list: {
        if (v.is_generator()) throw TemplateError("TypeError: Object of type generator is not JSON serializable");
        const List& list = v.as_list();
        if (list.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < list.size(); ++i) {
          if (i) out += item_separator;
          if (indent) newline(depth + 1);
          write(list[i], depth + 1);
        }
        if (indent) newline(depth);
        out += ']';
        return;
      }
      case Value::Kind::dict: {
        if (v.as_dict().is_namespace) throw TemplateError("TypeError: Object of type Namespace is not JSON serializable");
        const Dict& d = v.as_dict();
        std::vector<size_t> order(d.items.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        if (sort_keys) {  // as Python sorts the keys: numbers by value, strings by text
          std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            const Value ka = d.key(a), kb = d.key(b);
            return ka.is_string() || kb.is_string() ? d.items[a].first < d.items[b].first : ka.less_than(kb);
          });
        }
        if (order.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t n = 0; n < order.size(); ++n) {
          if (n) out += item_separator;
          if (indent) newline(depth + 1);
          const Value key = d.key(order[n]);
          // Python's json writes a number, bool or none key as its JSON text, quoted.
          json_string(key.is_string() ? key.as_string() : key.is_bool() ? (key.as_bool() ? "true" : "false") : key.is_none() ? "null" : key.repr(),
                      out);
          out += key_separator;
          write(d.items[order[n]].second, depth + 1);
        }
        if (indent) newline(depth);
        out += '}';
        return;
      }
      case Value::Kind::undefined:
        throw TemplateError("TypeError: Object of type Undefined is not JSON serializable");
      case Value::Kind::function:
        throw TemplateError("TypeError: Object of type function is not JSON serializable");
    }
  }
};

}  // namespace

Value::Value(List list, Flavor flavor)
    : kind_(Kind::list), flavor_(flavor), list_(std::make_shared<const List>(std::move(list))) {}

Value::Value(std::shared_ptr<Dict> dict) : kind_(Kind::dict), dict_(std::move(dict)) {}

Value Value::function(std::string name, Function f) {
  Value v(Kind::function);
  v.text_ = std::move(name);
  v.function_ = std::make_shared<const Function>(std::move(f));
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean:
    case Kind::integer: return int_ != 0;
    case Kind::real: return real_ != 0;
    case Kind::string: return !text_.empty();
    case Kind::list: return is_generator() || !list_->empty();
    case Kind::dict: return dict_->is_namespace || !dict_->items.empty();
    case Kind::function: return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::undefined: return "";
    case Kind::string: return text_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return int_ ? "True" : "False";
    case Kind::integer: return std::to_string(int_);
    case Kind::real: return std::isnan(real_) ? "nan" : std::isinf(real_) ? (real_ > 0 ? "inf" : "-inf") : format_float(real_);
    case Kind::string: return repr_string(text_);
    case Kind::list: {
      if (is_generator()) throw TemplateError("a generator (the result of map, select, ...) has no text form: pass it through |list");
      std::string out = is_tuple() ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (is_tuple() && list_->size() == 1) out += ",";
      return out + (is_tuple() ? ")" : "]");
    }
    case Kind::dict: {
      if (dict_->is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        out += (i ? ", " : "") + dict_->key(i).repr() + ": " + dict_->items[i].second.repr();
      }
      return out + "}";
    }
    case Kind::function: return "<function " + text_ + ">";
  }
  return "";
}

List Value::iterate() const {
  switch (kind_) {
    case Kind::undefined: return {};
    case Kind::list: return *list_;
    case Kind::dict: {
      List keys;
      for (size_t i = 0; i < dict_->items.size(); ++i) keys.push_back(dict_->key(i));
      return keys;
    }
    case Kind::string: {
      List chars;
      for (size_t i = 0; i < text_.size();) {
        const size_t n = std::max<size_t>(1, std::min(utf8_sequence_length(uint8_t(text_[i])), text_.size() - i));
        chars.emplace_back(text_.substr(i, n));
        i += n;
      }
      return chars;
    }
    default: throw TemplateError(std::string("TypeError: '") + type_name() + "' object is not iterable");
  }
}

size_t Value::length() const {
  switch (kind_) {
    case Kind::undefined: return 0;
    case Kind::string: return utf8_length(text_);
    case Kind::list:
      if (is_generator()) throw TemplateError("TypeError: object of type 'generator' has no len()");
      return list_->size();
    case Kind::dict: return dict_->items.size();
    default: throw TemplateError(std::string("TypeError: object of type '") + type_name() + "' has no len()");
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::real: return "float";
    case Kind::string: return "str";
    case Kind::list: return is_generator() ? "generator" : is_tuple() ? "tuple" : "list";
    case Kind::dict: return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::function: return "function";
  }
  return "?";
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_real() || b.is_real()) return a.as_real() == b.as_real();
    return a.as_int() == b.as_int();
  }
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.text_ == b.text_;
    case Value::Kind::list:
      return a.list_ == b.list_ || (!a.is_generator() && !b.is_generator() && a.is_tuple() == b.is_tuple() && *a.list_ == *b.list_);
    case Value::Kind::dict: {
      if (a.dict_ == b.dict_) return true;
      if (a.dict_->is_namespace || b.dict_->is_namespace || a.dict_->items.size() != b.dict_->items.size()) return false;
      for (size_t i = 0; i < a.dict_->items.size(); ++i) {
        const Value* other = b.dict_->find_key(a.dict_->key(i));
        if (!other || !(*other == a.dict_->items[i].second)) return false;
      }
      return true;
    }
    case Value::Kind::function: return a.function_ == b.function_;
    default: return false;
  }
}

bool Value::less_than(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_real() || other.is_real()) return as_real() < other.as_real();
    return as_int() < other.as_int();
  }
  if (is_string() && other.is_string()) return text_ < other.text_;  // UTF-8 byte order is code point order
  if (is_list() && other.is_list() && !is_generator() && !other.is_generator()) {
    return std::lexicographical_compare(list_->begin(), list_->end(), other.list_->begin(), other.list_->end(),
                                        [](const Value& a, const Value& b) { return a.less_than(b); });
  }
  throw TemplateError(std::string("TypeError: '<' not supported between instances of '") + type_name() + "' and '" +
                      other.type_name() + "'");
}

namespace {

// Builds Values straight from the parser's events: an object's keys go into a
// hashed Dict, so a body with many keys costs linear time, in their order.
class ValueBuilder {
 public:
  Value result;

  bool null() { return put(Value::none()); }
  bool boolean(bool b) { return put(Value(b)); }
  bool number_integer(int64_t i) { return put(Value(i)); }
  bool number_unsigned(uint64_t u) { return put(u > uint64_t(INT64_MAX) ? Value(double(u)) : Value(int64_t(u))); }
  bool number_float(double d, const std::string&) { return put(Value(d)); }
  bool string(std::string& s) { return put(Value(std::move(s))); }
  bool binary(std::vector<uint8_t>&) { return false; }
  bool start_object(size_t) {
    stack_.push_back({make_dict(), {}, {}});
    return true;
  }
  bool key(std::string& k) {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return finish(Value(stack_.back().dict)); }
  bool start_array(size_t) {
    stack_.push_back({nullptr, {}, {}});
    return true;
  }
  bool end_array() { return finish(Value(std::move(stack_.back().list))); }
  bool parse_error(size_t, const std::string&, const std::exception& e) {
    error = e.what();
    return false;
  }
  std::string error;

 private:
  struct Open {
    std::shared_ptr<Dict> dict;  // null: an array
    List list;
    std::string key;
  };

  bool put(Value v) {
    if (stack_.empty()) result = std::move(v);
    else if (stack_.back().dict) stack_.back().dict->set(stack_.back().key, std::move(v));
    else stack_.back().list.push_back(std::move(v));
    return true;
  }
  bool finish(Value v) {
    stack_.pop_back();
    return put(std::move(v));
  }
  std::vector<Open> stack_;
};

}  // namespace

Result<Value> Value::parse_json(const std::string& text) {
  ValueBuilder builder;
  if (!nlohmann::json::sax_parse(text, &builder)) {
    return Status::error("invalid JSON: " + (builder.error.empty() ? std::string("binary values") : builder.error));
  }
  return builder.result;
}

const Value* Dict::find(const std::string& key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const std::string& key, Value value) {
  const auto [it, inserted] = index_.emplace(key, items.size());
  if (inserted) items.emplace_back(key, std::move(value));
  else items[it->second].second = std::move(value);
}

namespace {

// The identity of a key that is not a string (or, inside a tuple, one that is); nullopt when it cannot be one (unhashable).
std::optional<std::string> typed_key_text(const Value& key) {
  if (key.is_bool() || key.is_int()) return "i" + std::to_string(key.as_int());
  if (key.is_real()) {
    const double d = key.as_real();
    if (d == std::floor(d) && std::fabs(d) < 9.2e18) return "i" + std::to_string(int64_t(d));
    return "f" + key.repr();
  }
  if (key.is_none()) return std::string("n");
  if (key.is_string()) return "s" + std::to_string(key.as_string().size()) + ":" + key.as_string();
  if (key.is_tuple()) {  // a tuple of hashable values is one
    std::string text = "t(";
    for (const Value& item : key.as_list()) {
      const std::optional<std::string> part = typed_key_text(item);
      if (!part) return std::nullopt;
      text += *part + ",";
    }
    return text + ")";
  }
  return std::nullopt;
}

}  // namespace

const Value* Dict::find_key(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  const std::optional<std::string> text = typed_key_text(key);
  if (!text) return nullptr;
  const auto it = typed_index_.find(*text);
  return it == typed_index_.end() ? nullptr : &items[it->second].second;
}

void Dict::set_key(const Value& key, Value value) {
  if (key.is_string()) return set(key.as_string(), std::move(value));
  const std::optional<std::string> text = typed_key_text(key);
  if (!text) throw TemplateError(std::string("TypeError: unhashable type: '") + key.type_name() + "'");
  const auto [it, inserted] = typed_index_.emplace(*text, items.size());
  if (!inserted) {
    items[it->second].second = std::move(value);
    return;
  }
  typed_keys_.emplace(items.size(), key);
  items.emplace_back(key.str(), std::move(value));
}

Value Dict::key(size_t i) const {
  const auto it = typed_keys_.find(i);
  return it == typed_keys_.end() ? Value(items[i].first) : it->second;
}

std::shared_ptr<Dict> make_dict(std::vector<std::pair<std::string, Value>> items) {
  auto dict = std::make_shared<Dict>();
  for (auto& [key, value] : items) dict->set(key, std::move(value));
  return dict;
}

Value CallArgs::get(size_t position, const std::string& name, Value fallback) const {
  const Value* named = nullptr;
  for (const auto& [key, value] : keyword) {
    if (key == name) named = &value;
  }
  if (position < positional.size()) {
    if (named) throw TemplateError("TypeError: got multiple values for argument '" + name + "'");
    return positional[position];
  }
  return named ? *named : fallback;
}

void CallArgs::expect(const std::string& callee, size_t max_positional, const std::vector<std::string>& names) const {
  if (positional.size() > max_positional) {
    throw TemplateError("TypeError: " + callee + " takes at most " + std::to_string(max_positional) + " positional argument(s)");
  }
  for (const auto& [key, value] : keyword) {
    if (std::find(names.begin(), names.end(), key) == names.end()) {
      throw TemplateError("TypeError: " + callee + " got an unexpected keyword argument '" + key + "'");
    }
  }
}

std::string format_float(double d) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);  // d[.ddd]e±XX, the shortest digits that read back
  const size_t e = sci.find('e');
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  bool negative = false;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] == '-') negative = true;
    else if (sci[i] != '.') digits += sci[i];
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) return out + "0." + std::string(size_t(-exponent - 1), '0') + digits;
  if (digits.size() <= size_t(exponent) + 1) return out + digits + std::string(size_t(exponent) + 1 - digits.size(), '0') + ".0";
  return out + digits.substr(0, size_t(exponent) + 1) + "." + digits.substr(size_t(exponent) + 1);
}

std::string to_json(const Value& v, std::optional<int> indent, std::optional<std::pair<std::string, std::string>> separators,
                    bool sort_keys) {
  JsonWriter writer{indent, indent ? "," : ", ", ": ", sort_keys, {}};
  if (separators) {
    writer.item_separator = separators->first;
    writer.key_separator = separators->second;
  }
  writer.write(v, 0);
  return writer.out;
}

}  // namespace ds::jinja
