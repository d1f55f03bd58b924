#include "template/jinja_builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <map>

#include "template/jinja_printf.h"
#include "tokenizer/utf8.h"

namespace ds::jinja {
namespace {

[[noreturn]] void type_error(const std::string& what) { throw TemplateError("TypeError: " + what); }

[[noreturn]] void undefined_error(const Value& v) { throw TemplateError("UndefinedError: " + v.hint()); }

// --- Python str helpers (code points where Python counts them) ---

std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (const Value& c : Value(s).iterate()) out.push_back(c.as_string());
  return out;
}

// Python's str.isspace() set: ASCII whitespace, \x1c-\x1f and the Unicode spaces.
bool is_python_space(const std::string& c) {
  static const char* const unicode[] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9",
                                        "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
  if (c.size() == 1) return c[0] == ' ' || (c[0] >= '\t' && c[0] <= '\r') || (c[0] >= '\x1c' && c[0] <= '\x1f');
  for (const char* u : unicode) {
    if (c == u) return true;
  }
  return c.size() == 3 && uint8_t(c[0]) == 0xe2 && uint8_t(c[1]) == 0x80 && uint8_t(c[2]) >= 0x80 && uint8_t(c[2]) <= 0x8a;
}

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<std::string> cs = characters(s);
  std::vector<std::string> set;
  if (chars.is_string()) set = characters(chars.as_string());
  else if (!chars.is_none() && !chars.is_undefined()) type_error("strip arg must be None or str");
  auto strippable = [&](const std::string& c) {
    return chars.is_string() ? std::find(set.begin(), set.end(), c) != set.end() : is_python_space(c);
  };
  size_t begin = 0, end = cs.size();
  if (left) while (begin < end && strippable(cs[begin])) ++begin;
  if (right) while (end > begin && strippable(cs[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cs[i];
  return out;
}

List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  List parts;
  if (sep.is_none() || sep.is_undefined()) {
    const std::vector<std::string> cs = characters(s);
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    for (const std::string& c : cs) {
      if (is_python_space(c)) {
        if (in_word) words.push_back(word), word.clear(), in_word = false;
      } else {
        word += c, in_word = true;
      }
    }
    if (in_word) words.push_back(word);
    if (maxsplit >= 0 && int64_t(words.size()) > maxsplit + 1) {
      // Rare: re-split keeping the remainder whole, as Python does.
      std::vector<std::string> kept;
      std::string rest = strip(s, Value::none(), !from_right, from_right);
      for (int64_t i = 0; i < maxsplit; ++i) {
        List one = split(rest, Value::none(), 1, from_right);
        kept.push_back(from_right ? one.back().as_string() : one.front().as_string());
        rest = strip(from_right ? one.front().as_string() : one.back().as_string(), Value::none(), !from_right, from_right);
      }
      if (from_right) std::reverse(kept.begin(), kept.end());
      if (from_right) kept.insert(kept.begin(), rest);
      else kept.push_back(rest);
      words = kept;
    }
    for (auto& w : words) parts.emplace_back(w);
    return parts;
  }
  if (!sep.is_string()) type_error("must be str or None, not " + std::string(sep.type_name()));
  const std::string d = sep.as_string();
  if (d.empty()) throw TemplateError("ValueError: empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    for (size_t at; (maxsplit < 0 || int64_t(pieces.size()) < maxsplit) && (at = s.find(d, start)) != std::string::npos;) {
      pieces.push_back(s.substr(start, at - start));
      start = at + d.size();
    }
    pieces.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    for (size_t at; (maxsplit < 0 || int64_t(pieces.size()) < maxsplit) && end >= d.size() &&
                    (at = s.rfind(d, end - d.size())) != std::string::npos;) {
      pieces.insert(pieces.begin(), s.substr(at + d.size(), end - at - d.size()));
      end = at;
    }
    pieces.insert(pieces.begin(), s.substr(0, end));
  }
  for (auto& p : pieces) parts.emplace_back(p);
  return parts;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const std::vector<std::string> cs = characters(s);
    int64_t done = 0;
    for (const std::string& c : cs) {
      if (count < 0 || done < count) out += to, ++done;
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  for (size_t at; (count < 0 || done < count) && (at = s.find(from, start)) != std::string::npos; ++done) {
    out += s.substr(start, at - start) + to;
    start = at + from.size();
  }
  return out + s.substr(start);
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = char(upper ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c)));
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_case(s, false);
  if (!out.empty()) out[0] = char(std::toupper(uint8_t(out[0])));
  return out;
}

std::string title(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (const char c : s) {
    const bool cased = std::isalpha(uint8_t(c));
    out += cased ? char(previous_cased ? std::tolower(uint8_t(c)) : std::toupper(uint8_t(c))) : c;
    previous_cased = cased;
  }
  return out;
}

std::string need_string(const Value& v, const char* what) {
  if (!v.is_string()) type_error(std::string(what) + " needs a str, not " + v.type_name());
  return v.as_string();
}

int64_t need_int(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool()) type_error(std::string(what) + " needs an int, not " + v.type_name());
  return v.as_int();
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto one = [&](const std::string& a) {
    return a.size() <= s.size() && (start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0);
  };
  if (affix.is_list()) {
    for (const Value& a : affix.as_list()) {
      if (one(need_string(a, start ? "startswith" : "endswith"))) return true;
    }
    return false;
  }
  return one(need_string(affix, start ? "startswith" : "endswith"));
}

// str.format with {} / {0} / {name} fields, as templates use it.
std::string format_string(const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{', ++i;
    } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}', ++i;
    } else if (f[i] == '{') {
      const size_t close = f.find('}', i);
      if (close == std::string::npos) throw TemplateError("ValueError: Single '{' encountered in format string");
      const std::string field = f.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) throw TemplateError("str.format: only plain fields are supported");
      Value v;
      if (field.empty() || std::isdigit(uint8_t(field[0]))) {
        const size_t index = field.empty() ? auto_index++ : size_t(std::stoul(field));
        if (index >= args.positional.size()) throw TemplateError("IndexError: Replacement index out of range");
        v = args.positional[index];
      } else {
        v = args.get(size_t(-1), field, Value::undefined("KeyError: '" + field + "'"));
        if (v.is_undefined()) throw TemplateError(v.hint());
      }
      out += v.str();
      i = close;
    } else {
      out += f[i];
    }
  }
  return out;
}

// str.rjust / ljust / center (`how`): `s` padded with `fill` to `width` code points, as CPython pads.
std::string justify(const std::string& s, int64_t width, const std::string& fill, const std::string& how) {
  const int64_t length = int64_t(utf8_length(s));
  if (width <= length) return s;
  const int64_t margin = std::min<int64_t>(width, 1 << 20) - length;
  const int64_t left = how == "rjust" ? margin : how == "ljust" ? 0 : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < margin; ++i) out += fill;
  return out;
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& a) {
  if (name == "startswith" || name == "endswith") return starts_or_ends(s, a.get(0, "prefix"), name == "startswith");
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return strip(s, a.get(0, "chars", Value::none()), name != "rstrip", name != "lstrip");
  }
  if (name == "split" || name == "rsplit") {
    return Value(split(s, a.get(0, "sep", Value::none()), need_int(a.get(1, "maxsplit", -1), "maxsplit"), name == "rsplit"));
  }
  if (name == "replace") {
    return replace(s, need_string(a.get(0, "old"), "replace"), need_string(a.get(1, "new"), "replace"),
                   need_int(a.get(2, "count", -1), "replace"));
  }
  if (name == "rjust" || name == "ljust" || name == "center") {
    const std::string fill = need_string(a.get(1, "fillchar", Value(" ")), name.c_str());
    if (utf8_length(fill) != 1) throw TemplateError("TypeError: The fill character must be exactly one character long");
    return justify(s, need_int(a.get(0, "width"), name.c_str()), fill, name);
  }
  if (name == "upper" || name == "lower") return ascii_case(s, name == "upper");
  if (name == "title") return title(s);
  if (name == "capitalize") return capitalize(s);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const std::string sub = need_string(a.get(0, "sub"), name.c_str());
    const size_t at = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
      if (name.find("index") != std::string::npos) throw TemplateError("ValueError: substring not found");
      return Value(int64_t(-1));
    }
    return Value(int64_t(utf8_length(std::string_view(s).substr(0, at))));
  }
  if (name == "count") {
    const std::string sub = need_string(a.get(0, "sub"), "count");
    if (sub.empty()) return Value(int64_t(utf8_length(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : a.get(0, "iterable").iterate()) {
      out += (first ? "" : s) + need_string(v, "join");
      first = false;
    }
    return out;
  }
  if (name == "splitlines") {
    List lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.emplace_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return Value(std::move(lines));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    if (s.empty()) return false;
    bool any_cased = false;
    for (const std::string& c : characters(s)) {
      const uint8_t b = uint8_t(c[0]);
      if (name == "isspace") {
        if (!is_python_space(c)) return false;
      } else if (c.size() > 1) {
        if (name != "isalpha" && name != "isalnum") return false;  // non-ASCII letters: treated as letters
      } else if (name == "isdigit" ? !std::isdigit(b) : name == "isalpha" ? !std::isalpha(b) : name == "isalnum" ? !std::isalnum(b)
                 : name == "isupper" ? std::islower(b) : std::isupper(b)) {
        return false;
      }
      any_cased = any_cased || std::isalpha(b);
    }
    return name == "isupper" || name == "islower" ? any_cased : true;
  }
  if (name == "format") return format_string(s, a);
  throw TemplateError("str has no method '" + name + "' that dsinfer's Jinja supports");
}

const std::vector<std::string> k_string_methods = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "replace", "upper", "lower", "title",
    "capitalize", "find", "rfind", "index", "rindex", "count", "join", "splitlines", "isdigit", "isalpha", "isalnum",
    "isspace", "isupper", "islower", "format", "rjust", "ljust", "center"};
const std::vector<std::string> k_unsafe_dict_methods = {"pop", "popitem", "update", "setdefault", "clear"};
const std::vector<std::string> k_unsafe_list_methods = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value unsafe(const Value& object, const std::string& name) {
  return Value::undefined(std::string("SecurityError: access to attribute '") + name + "' of '" + object.type_name() +
                          "' object is unsafe.");
}

Value dict_items(const Dict& d) {
  List items;
  for (size_t i = 0; i < d.items.size(); ++i) items.emplace_back(List{d.key(i), d.items[i].second}, Value::Flavor::tuple);
  return Value(std::move(items));
}

// Markup's own methods (strip, upper, ...) give Markup back.
Value same_kind(const Value& original, Value result) {
  return original.is_markup() && result.is_string() ? Value::markup(result.as_string()) : result;
}

Value method(const Value& object, const std::string& name) {
  if (object.is_string()) {
    if (!contains(k_string_methods, name)) return Value();
    return Value::function("str." + name, [object, name](CallArgs& a) { return same_kind(object, string_method(object.as_string(), name, a)); });
  }
  if (object.is_dict() && !object.as_dict().is_namespace) {
    if (contains(k_unsafe_dict_methods, name)) return unsafe(object, name);
    if (name == "get") {
      return Value::function("dict.get", [object](CallArgs& a) {
        const Value* v = object.as_dict().find_key(a.get(0, "key"));
        return v ? *v : a.get(1, "default", Value::none());
      });
    }
    if (name == "items") return Value::function("dict.items", [object](CallArgs&) { return dict_items(object.as_dict()); });
    if (name == "keys" || name == "values") {
      return Value::function("dict." + name, [object, name](CallArgs&) {
        List out;
        const Dict& d = object.as_dict();
        for (size_t i = 0; i < d.items.size(); ++i) out.push_back(name == "keys" ? d.key(i) : d.items[i].second);
        return Value(std::move(out));
      });
    }
    if (name == "copy") {
      return Value::function("dict.copy", [object](CallArgs&) {
        auto copy = make_dict();
        const Dict& d = object.as_dict();
        for (size_t i = 0; i < d.items.size(); ++i) copy->set_key(d.key(i), d.items[i].second);
        return Value(copy);
      });
    }
    return Value();
  }
  if (object.is_list() && !object.is_generator()) {
    if (contains(k_unsafe_list_methods, name)) return unsafe(object, name);
    if (name == "index" || name == "count") {
      return Value::function("list." + name, [object, name](CallArgs& a) {
        const Value x = a.get(0, "value");
        const List& list = object.as_list();
        int64_t n = 0;
        for (size_t i = 0; i < list.size(); ++i) {
          if (list[i] == x) {
            if (name == "index") return Value(int64_t(i));
            ++n;
          }
        }
        if (name == "index") throw TemplateError("ValueError: " + x.repr() + " is not in list");
        return Value(n);
      });
    }
  }
  return Value();
}

// --- filters ---

// item.attr.sub, or item[0] for digit parts, as jinja2's make_attrgetter.
Value attribute_path(const Value& item, const Value& path) {
  if (path.is_int()) return get_item(item, path);
  Value v = item;
  for (const Value& part : split(need_string(path, "attribute"), Value("."), -1, false)) {
    const std::string& p = part.as_string();
    const bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return std::isdigit(uint8_t(c)); });
    v = get_item(v, digits ? Value(int64_t(std::stoll(p))) : part);
  }
  return v;
}

CallArgs rest_of(const CallArgs& args, size_t from) {
  CallArgs rest;
  if (args.positional.size() > from) rest.positional.assign(args.positional.begin() + long(from), args.positional.end());
  rest.keyword = args.keyword;
  return rest;
}

// select/reject/selectattr/rejectattr
Value select(const Value& subject, const CallArgs& args, bool by_attribute, bool keep) {
  List out;
  const size_t test_at = by_attribute ? 1 : 0;
  const Value test = args.get(test_at, "", Value());
  const CallArgs test_args = rest_of(args, test_at + 1);
  if (!subject.truthy()) return Value(List{}, Value::Flavor::generator);  // jinja2 iterates only a true value: none selects nothing
  for (const Value& item : subject.iterate()) {
    const Value v = by_attribute ? attribute_path(item, args.get(0, "attribute")) : item;
    const bool passed = test.is_undefined() ? v.truthy() : apply_test(need_string(test, "a test name"), v, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value(std::move(out), Value::Flavor::generator);
}

Value map_filter(const Value& subject, const CallArgs& args) {
  List out;
  if (!subject.truthy()) return Value(List{}, Value::Flavor::generator);
  const Value attribute = args.get(size_t(-1), "attribute");
  if (!attribute.is_undefined()) {
    const Value fallback = args.get(size_t(-1), "default");
    for (const Value& item : subject.iterate()) {
      Value v = attribute_path(item, attribute);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value(std::move(out), Value::Flavor::generator);
  }
  const std::string filter = need_string(args.get(0, "filter"), "map");
  if (!has_filter(filter)) throw TemplateError("map: no filter named '" + filter + "'");
  const CallArgs filter_args = rest_of(args, 1);
  for (const Value& item : subject.iterate()) out.push_back(apply_filter(filter, item, filter_args));
  return Value(std::move(out), Value::Flavor::generator);
}

Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(ascii_case(v.as_string(), false)) : v;
}

List sorted(List items, bool reverse, const std::function<Value(const Value&)>& key) {
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? key(b).less_than(key(a)) : key(a).less_than(key(b));
  });
  return items;
}

std::string indent(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string pad = width.is_string() ? width.as_string() : std::string(size_t(std::max<int64_t>(0, need_int(width, "indent"))), ' ');
  const List lines = string_method(s + "\n", "splitlines", {}).as_list();
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i > 0) out += "\n" + ((blank || !line.empty()) ? pad : "");
    out += line;
  }
  return first ? pad + out : out;
}

std::string escape_text(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python's float(text) of a stripped string: decimal or exponent notation, inf, nan; not C's hex floats.
std::optional<double> python_float(const std::string& t) {
  if (t.empty() || t.find_first_of("xXpP(") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

// jinja2's int filter: int(text, base) for a string, else int(value); failing that int(float(value)), else `fallback`.
Value to_int(const Value& v, const Value& fallback, int64_t base) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_real()) return std::isfinite(v.as_real()) ? Value(int64_t(v.as_real())) : fallback;
  if (!v.is_string()) return fallback;
  const std::string t = strip(v.as_string(), Value::none(), true, true);
  if (base < 2 || base > 36) throw TemplateError("ValueError: int() base must be >= 2 and <= 36");
  char* end = nullptr;
  errno = 0;
  const long long i = t.empty() || std::isspace(uint8_t(t[0])) ? 0 : std::strtoll(t.c_str(), &end, int(base));
  if (end == t.c_str() + t.size() && !t.empty() && errno == 0) return Value(int64_t(i));
  const std::optional<double> d = python_float(t);
  return d && std::isfinite(*d) ? Value(int64_t(*d)) : fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number()) return Value(v.as_real());
  if (!v.is_string()) return fallback;
  const std::optional<double> d = python_float(strip(v.as_string(), Value::none(), true, true));
  return d ? Value(*d) : fallback;
}

using Filter = std::function<Value(const Value&, const CallArgs&)>;

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = [] {
    std::map<std::string, Filter> t;
    t["tojson"] = [](const Value& v, const CallArgs& a) {
      a.expect("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
      if (a.get(0, "ensure_ascii", false).truthy()) throw TemplateError("tojson: ensure_ascii=True is not supported");
      const Value indent = a.get(1, "indent", Value::none());
      const Value separators = a.get(2, "separators", Value::none());
      std::optional<std::pair<std::string, std::string>> seps;
      if (!separators.is_none()) {
        if (!separators.is_list() || separators.as_list().size() != 2) type_error("tojson separators must be a pair");
        seps = std::make_pair(need_string(separators.as_list()[0], "separators"), need_string(separators.as_list()[1], "separators"));
      }
      return Value(to_json(v, indent.is_none() ? std::nullopt : std::optional<int>(int(need_int(indent, "indent"))), seps,
                           a.get(3, "sort_keys", false).truthy()));
    };
    t["trim"] = [](const Value& v, const CallArgs& a) { return same_kind(v, Value(strip(v.str(), a.get(0, "chars", Value::none()), true, true))); };
    t["length"] = [](const Value& v, const CallArgs&) { return Value(v.length()); };
    t["count"] = t["length"];
    t["default"] = [](const Value& v, const CallArgs& a) {
      const bool boolean = a.get(1, "boolean", false).truthy();
      return v.is_undefined() || (boolean && !v.truthy()) ? a.get(0, "default_value", Value("")) : v;
    };
    t["d"] = t["default"];
    t["items"] = [](const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value(List{}, Value::Flavor::generator);
      if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
      return Value(dict_items(v.as_dict()).as_list(), Value::Flavor::generator);
    };
    t["dictsort"] = [](const Value& v, const CallArgs& a) {
      if (!v.is_dict()) type_error("dictsort needs a mapping");
      const bool case_sensitive = a.get(0, "case_sensitive", false).truthy();
      const std::string by = a.get(1, "by", Value("key")).str();
      const size_t at = by == "key" ? 0 : by == "value" ? 1 : throw TemplateError("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
      return Value(sorted(dict_items(v.as_dict()).as_list(), a.get(2, "reverse", false).truthy(),
                          [&](const Value& item) { return sort_key(item.as_list()[at], case_sensitive); }));
    };
    t["selectattr"] = [](const Value& v, const CallArgs& a) { return select(v, a, true, true); };
    t["rejectattr"] = [](const Value& v, const CallArgs& a) { return select(v, a, true, false); };
    t["select"] = [](const Value& v, const CallArgs& a) { return select(v, a, false, true); };
    t["reject"] = [](const Value& v, const CallArgs& a) { return select(v, a, false, false); };
    t["map"] = map_filter;
    t["join"] = [](const Value& v, const CallArgs& a) {
      const std::string separator = a.get(0, "d", Value("")).str();
      const Value attribute = a.get(1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& item : v.iterate()) {
        out += (first ? "" : separator) + (attribute.is_undefined() ? item : attribute_path(item, attribute)).str();
        first = false;
      }
      return Value(out);
    };
    t["replace"] = [](const Value& v, const CallArgs& a) {
      const Value count = a.get(2, "count", Value::none());
      return Value(replace(v.str(), a.get(0, "old").str(), a.get(1, "new").str(), count.is_none() ? -1 : need_int(count, "replace")));
    };
    t["string"] = [](const Value& v, const CallArgs&) { return v.is_string() ? v : Value(v.str()); };
    t["upper"] = [](const Value& v, const CallArgs&) { return same_kind(v, Value(ascii_case(v.str(), true))); };
    t["lower"] = [](const Value& v, const CallArgs&) { return same_kind(v, Value(ascii_case(v.str(), false))); };
    t["capitalize"] = [](const Value& v, const CallArgs&) { return same_kind(v, Value(capitalize(v.str()))); };
    t["title"] = [](const Value& v, const CallArgs&) { return same_kind(v, Value(title(v.str()))); };
    t["safe"] = [](const Value& v, const CallArgs&) { return v.is_markup() ? v : Value::markup(v.str()); };
    t["escape"] = [](const Value& v, const CallArgs&) { return escape_html(v); };
    t["format"] = [](const Value& v, const CallArgs& a) {  // printf-style: value % (kwargs or args)
      if (!a.positional.empty() && !a.keyword.empty()) throw TemplateError("FilterArgumentError: can't handle positional and keyword arguments at the same time");
      if (a.keyword.empty()) return Value(printf_format(v.str(), Value(a.positional, Value::Flavor::tuple)));
      auto named = make_dict();
      for (const auto& [key, value] : a.keyword) named->set(key, value);
      return Value(printf_format(v.str(), Value(named)));
    };
    t["forceescape"] = [](const Value& v, const CallArgs&) { return Value::markup(escape_text(v.str())); };
    t["center"] = [](const Value& v, const CallArgs& a) {
      return Value(justify(v.str(), need_int(a.get(0, "width", Value(int64_t(80))), "center"), " ", "center"));
    };
    t["truncate"] = [](const Value& v, const CallArgs& a) {  // jinja2's, with its default leeway of 5
      const std::string text = v.str();
      const int64_t length = need_int(a.get(0, "length", Value(int64_t(255))), "truncate");
      const bool killwords = a.get(1, "killwords", false).truthy();
      const std::string end = a.get(2, "end", Value("...")).str();
      const Value leeway_value = a.get(3, "leeway", Value::none());
      const int64_t leeway = leeway_value.is_none() ? 5 : need_int(leeway_value, "truncate");
      if (length < int64_t(utf8_length(end))) throw TemplateError("AssertionError: expected length >= " + std::to_string(utf8_length(end)));
      if (leeway < 0) throw TemplateError("AssertionError: expected leeway >= 0");
      if (int64_t(utf8_length(text)) <= length + leeway) return Value(text);
      const List chars = Value(text).iterate();
      std::string head;
      for (int64_t i = 0; i < length - int64_t(utf8_length(end)); ++i) head += chars[size_t(i)].as_string();
      if (!killwords) {
        const size_t space = head.rfind(' ');
        if (space != std::string::npos) head.resize(space);
      }
      return Value(head + end);
    };
    t["slice"] = [](const Value& v, const CallArgs& a) {  // jinja2's: `slices` columns, the first ones one longer
      const List items = v.iterate();
      const int64_t slices = need_int(a.get(0, "slices"), "slice");
      if (slices <= 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
      const Value fill = a.get(1, "fill_with", Value::none());
      const int64_t per = int64_t(items.size()) / slices, extra = int64_t(items.size()) % slices;
      List out;
      int64_t offset = 0;
      for (int64_t n = 0; n < slices; ++n) {
        const int64_t start = offset + n * per;
        if (n < extra) ++offset;
        const int64_t end = offset + (n + 1) * per;
        List column(items.begin() + start, items.begin() + end);
        if (!fill.is_none() && n >= extra) column.push_back(fill);
        out.emplace_back(std::move(column));
      }
      return Value(std::move(out), Value::Flavor::generator);
    };
    t["e"] = t["escape"];
    t["list"] = [](const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value(List{});
      return Value(v.iterate());
    };
    t["first"] = [](const Value& v, const CallArgs&) {
      const List items = v.iterate();
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    t["last"] = [](const Value& v, const CallArgs&) {
      if (v.is_generator()) type_error("'generator' object is not reversible");
      const List items = v.iterate();
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    t["reverse"] = [](const Value& v, const CallArgs&) {
      if (v.is_string()) {
        std::vector<std::string> cs = characters(v.as_string());
        std::string out;
        for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
        return Value(out);
      }
      List items = v.iterate();
      std::reverse(items.begin(), items.end());
      return Value(std::move(items), Value::Flavor::generator);
    };
    t["sort"] = [](const Value& v, const CallArgs& a) {
      const bool case_sensitive = a.get(1, "case_sensitive", false).truthy();
      const Value attribute = a.get(2, "attribute", Value::none());
      return Value(sorted(v.iterate(), a.get(0, "reverse", false).truthy(), [&](const Value& item) {
        return sort_key(attribute.is_none() ? item : attribute_path(item, attribute), case_sensitive);
      }));
    };
    t["unique"] = [](const Value& v, const CallArgs& a) {
      const bool case_sensitive = a.get(0, "case_sensitive", false).truthy();
      const Value attribute = a.get(1, "attribute", Value::none());
      List out, seen;
      for (const Value& item : v.iterate()) {
        const Value key = sort_key(attribute.is_none() ? item : attribute_path(item, attribute), case_sensitive);
        if (std::find(seen.begin(), seen.end(), key) == seen.end()) seen.push_back(key), out.push_back(item);
      }
      return Value(std::move(out), Value::Flavor::generator);
    };
    for (const bool largest : {false, true}) {
      t[largest ? "max" : "min"] = [largest](const Value& v, const CallArgs& a) {
        const bool case_sensitive = a.get(0, "case_sensitive", false).truthy();
        const Value attribute = a.get(1, "attribute", Value::none());
        List items = sorted(v.iterate(), largest, [&](const Value& x) {
          return sort_key(attribute.is_none() ? x : attribute_path(x, attribute), case_sensitive);
        });
        return items.empty() ? Value::undefined("No aggregated item, sequence was empty.") : items.front();
      };
    }
    t["sum"] = [](const Value& v, const CallArgs& a) {
      Value total = a.get(1, "start", Value(int64_t(0)));
      const Value attribute = a.get(0, "attribute", Value::none());
      for (const Value& item : v.iterate()) {
        const Value x = attribute.is_none() ? item : attribute_path(item, attribute);
        if (!x.is_number() || !total.is_number()) type_error("sum needs numbers");
        total = total.is_real() || x.is_real() ? Value(total.as_real() + x.as_real()) : Value(total.as_int() + x.as_int());
      }
      return total;
    };
    t["int"] = [](const Value& v, const CallArgs& a) {
      return to_int(v, a.get(0, "default", Value(int64_t(0))), need_int(a.get(1, "base", Value(int64_t(10))), "int"));
    };
    t["float"] = [](const Value& v, const CallArgs& a) { return to_float(v, a.get(0, "default", Value(0.0))); };
    t["abs"] = [](const Value& v, const CallArgs&) {
      if (v.is_real()) return Value(std::fabs(v.as_real()));
      if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
      type_error(std::string("bad operand type for abs(): '") + v.type_name() + "'");
    };
    t["round"] = [](const Value& v, const CallArgs& a) {
      const int64_t precision = need_int(a.get(0, "precision", Value(int64_t(0))), "round");
      const std::string how = a.get(1, "method", Value("common")).str();
      if (how == "common") {  // Python's round(): the nearest decimal, ties to even
        char text[512];
        std::snprintf(text, sizeof text, "%.*f", int(std::clamp<int64_t>(precision, 0, 300)), v.as_real());
        return Value(std::strtod(text, nullptr));
      }
      if (how != "ceil" && how != "floor") throw TemplateError("FilterArgumentError: method must be common, ceil or floor");
      const double scale = std::pow(10.0, double(precision)), x = v.as_real() * scale;
      return Value((how == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    };
    t["indent"] = [](const Value& v, const CallArgs& a) {
      return Value(indent(v.str(), a.get(0, "width", Value(int64_t(4))), a.get(1, "first", false).truthy(), a.get(2, "blank", false).truthy()));
    };
    t["wordcount"] = [](const Value& v, const CallArgs&) { return Value(split(v.str(), Value::none(), -1, false).size()); };
    t["attr"] = [](const Value& v, const CallArgs& a) { return get_attribute(v, need_string(a.get(0, "name"), "attr")); };
    t["batch"] = [](const Value& v, const CallArgs& a) {
      const int64_t n = need_int(a.get(0, "linecount"), "batch");
      if (n <= 0) throw TemplateError("batch: linecount must be positive");
      List out, row;
      for (const Value& item : v.iterate()) {
        row.push_back(item);
        if (int64_t(row.size()) == n) out.emplace_back(std::move(row)), row.clear();
      }
      if (!row.empty()) {
        const Value fill = a.get(1, "fill_with", Value::none());
        if (!fill.is_none()) while (int64_t(row.size()) < n) row.push_back(fill);
        out.emplace_back(std::move(row));
      }
      return Value(std::move(out), Value::Flavor::generator);
    };
    return t;
  }();
  return table;
}

using Test = std::function<bool(const Value&, const CallArgs&)>;

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = [] {
    std::map<std::string, Test> t;
    t["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
    t["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
    t["mapping"] = [](const Value& v, const CallArgs&) { return v.is_dict() && !v.as_dict().is_namespace; };
    t["iterable"] = [](const Value& v, const CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace); };
    t["sequence"] = [](const Value& v, const CallArgs&) { return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_generator()) || (v.is_dict() && !v.as_dict().is_namespace); };
    t["number"] = [](const Value& v, const CallArgs&) { return v.is_number(); };
    t["integer"] = [](const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](const Value& v, const CallArgs&) { return v.is_real(); };
    t["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["callable"] = [](const Value& v, const CallArgs&) { return v.is_function(); };
    t["odd"] = [](const Value& v, const CallArgs&) { return need_int(v, "odd") % 2 != 0; };
    t["even"] = [](const Value& v, const CallArgs&) { return need_int(v, "even") % 2 == 0; };
    t["divisibleby"] = [](const Value& v, const CallArgs& a) {
      const int64_t d = need_int(a.get(0, "num"), "divisibleby");
      if (d == 0) throw TemplateError("ZeroDivisionError: integer modulo by zero");
      return need_int(v, "divisibleby") % d == 0;
    };
    t["eq"] = [](const Value& v, const CallArgs& a) { return v == a.get(0, "b"); };
    t["ne"] = [](const Value& v, const CallArgs& a) { return !(v == a.get(0, "b")); };
    t["lt"] = [](const Value& v, const CallArgs& a) { return v.less_than(a.get(0, "b")); };
    t["gt"] = [](const Value& v, const CallArgs& a) { return a.get(0, "b").less_than(v); };
    t["le"] = [](const Value& v, const CallArgs& a) { return !a.get(0, "b").less_than(v); };
    t["ge"] = [](const Value& v, const CallArgs& a) { return !v.less_than(a.get(0, "b")); };
    t["equalto"] = t["eq"], t["=="] = t["eq"], t["!="] = t["ne"], t["<"] = t["lt"], t[">"] = t["gt"];
    t["<="] = t["le"], t[">="] = t["ge"], t["greaterthan"] = t["gt"], t["lessthan"] = t["lt"];
    t["in"] = [](const Value& v, const CallArgs& a) {
      const Value container = a.get(0, "seq");
      if (container.is_string()) return v.is_string() && container.as_string().find(v.as_string()) != std::string::npos;
      for (const Value& item : container.iterate()) {
        if (item == v) return true;
      }
      return false;
    };
    t["sameas"] = [](const Value& v, const CallArgs& a) {
      const Value other = a.get(0, "other");
      return v.kind() == other.kind() && (v.is_none() || v.is_undefined() || v == other);
    };
    t["lower"] = [](const Value& v, const CallArgs&) { return v.is_string() && ascii_case(v.as_string(), false) == v.as_string(); };
    t["upper"] = [](const Value& v, const CallArgs&) { return v.is_string() && ascii_case(v.as_string(), true) == v.as_string(); };
    t["escaped"] = [](const Value&, const CallArgs&) { return false; };
    return t;
  }();
  return table;
}

std::string strftime_text(const std::string& format, std::time_t now) {
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(256, '\0');
  for (int attempt = 0; attempt < 4; ++attempt) {
    const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &local);
    if (n > 0 || format.empty()) return out.substr(0, n);
    out.resize(out.size() * 4);
  }
  return "";
}

}  // namespace

Value escape_html(const Value& v) { return v.is_markup() ? v : Value::markup(escape_text(v.str())); }

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError("no filter named '" + name + "'");
  if (subject.is_undefined() && name != "default" && name != "d" && name != "length" && name != "count" && name != "list" &&
      name != "items" && name != "string" && name != "trim" && name != "join" && name != "upper" && name != "lower" &&
      name != "safe" && name != "tojson" && name != "first" && name != "select" && name != "reject" &&
      name != "selectattr" && name != "rejectattr" && name != "map" && name != "escape" && name != "e" &&
      name != "replace" && name != "capitalize" && name != "title" && name != "wordcount" && name != "sort" &&
      name != "unique") {
    undefined_error(subject);
  }
  return it->second(subject, args);
}

bool apply_test(const std::string& name, const Value& subject, const CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("no test named '" + name + "'");
  return it->second(subject, args);
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) undefined_error(object);
  Value m = method(object, name);
  if (!m.is_undefined() || !m.hint().empty()) return m;
  if (object.is_dict()) {
    const Value* v = object.as_dict().find(name);
    if (v) return *v;
    return Value::undefined(object.as_dict().is_namespace ? "'Namespace' has no attribute '" + name + "'"
                                                          : "'dict object' has no attribute '" + name + "'");
  }
  std::string owner = object.is_none() ? "None" : object.type_name();
  if (!object.is_none()) owner += " object";
  return Value::undefined("'" + owner + "' has no attribute '" + name + "'");
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) undefined_error(object);
  if (object.is_dict() && !object.as_dict().is_namespace) {
    if (const Value* v = object.as_dict().find_key(key)) return *v;
    if (key.is_string()) {
      const Value m = method(object, key.as_string());
      if (!m.is_undefined()) return m;
    }
    return Value::undefined("'dict object' has no attribute " + key.repr());
  }
  if ((object.is_list() && !object.is_generator()) || object.is_string()) {
    if (key.is_string()) return get_attribute(object, key.as_string());
    if (!key.is_int() && !key.is_bool()) return Value::undefined(std::string(object.type_name()) + " object has no element " + key.repr());
    const List chars = object.is_string() ? object.iterate() : List();
    const List& items = object.is_string() ? chars : object.as_list();
    int64_t i = key.as_int();
    if (i < 0) i += int64_t(items.size());
    if (i < 0 || i >= int64_t(items.size())) return Value::undefined(std::string(object.type_name()) + " object has no element " + key.repr());
    return items[size_t(i)];
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined(std::string(object.type_name()) + " object has no element " + key.repr());
}

std::shared_ptr<Dict> make_globals(std::function<std::time_t()> now,
                                   std::function<void(const std::shared_ptr<Dict>&)> on_namespace) {
  auto g = make_dict();
  g->set("range", Value::function("range", [](CallArgs& a) {
    if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3) type_error("range expects 1 to 3 integers");
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) stop = need_int(a.positional[0], "range");
    else start = need_int(a.positional[0], "range"), stop = need_int(a.positional[1], "range");
    if (a.positional.size() == 3) step = need_int(a.positional[2], "range");
    if (step == 0) throw TemplateError("ValueError: range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 1'000'000) throw TemplateError("range: more than 1,000,000 items");
      out.emplace_back(i);
    }
    return Value(std::move(out));
  }));
  g->set("dict", Value::function("dict", [](CallArgs& a) {
    auto d = make_dict();
    for (const Value& p : a.positional) {
      if (!p.is_dict()) type_error("dict() takes a mapping");
      const Dict& from = p.as_dict();
      for (size_t i = 0; i < from.items.size(); ++i) d->set_key(from.key(i), from.items[i].second);
    }
    for (const auto& [key, value] : a.keyword) d->set(key, value);
    return Value(d);
  }));
  g->set("namespace", Value::function("namespace", [on_namespace](CallArgs& a) {
    auto d = make_dict();
    d->is_namespace = true;
    on_namespace(d);
    for (const Value& p : a.positional) {
      if (!p.is_dict()) type_error("namespace() takes a mapping");
      for (const auto& [key, value] : p.as_dict().items) d->set(key, value);
    }
    for (const auto& [key, value] : a.keyword) d->set(key, value);
    return Value(d);
  }));
  g->set("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateError("TemplateError: " + a.get(0, "message").str());
  }));
  g->set("strftime_now", Value::function("strftime_now", [now](CallArgs& a) {
    return Value(strftime_text(need_string(a.get(0, "format"), "strftime_now"), now()));
  }));
  return g;
}

}  // namespace ds::jinja
