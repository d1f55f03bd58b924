#pragma once
// The values a Jinja template computes with, behaving as the Python objects
// jinja2 would hold: None and Undefined, bool, int, float, str, list, dict
// (insertion-ordered), callables. Lists and dicts are shared, as Python
// references are; only a namespace() is ever mutated.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace ds::jinja {

// What a template's evaluation throws; ChatTemplate turns it into a Status
// naming the template line. Never leaves src/template/.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Value;
struct Dict;
struct CallArgs;
using List = std::vector<Value>;
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, real, string, list, dict, function };

  // What else a list or string is in Python: a generator (the lazy result of
  // map, select, ...: iterable, but with no length, index or JSON form), a
  // tuple (printed in parentheses), a Markup string.
  enum class Flavor : uint8_t { plain, generator, tuple, markup };

  Value() = default;  // undefined
  static Value undefined(std::string hint) {
    Value v;
    v.text_ = std::move(hint);
    return v;
  }
  static Value none() { return Value(Kind::none); }
  Value(bool b) : kind_(Kind::boolean), int_(b) {}
  Value(int64_t i) : kind_(Kind::integer), int_(i) {}
  Value(int i) : kind_(Kind::integer), int_(i) {}
  Value(size_t i) : kind_(Kind::integer), int_(int64_t(i)) {}
  Value(double d) : kind_(Kind::real), real_(d) {}
  Value(std::string s) : kind_(Kind::string), text_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::string), text_(s) {}
  Value(List list, Flavor flavor = Flavor::plain);
  Value(std::shared_ptr<Dict> dict);
  static Value function(std::string name, Function f);
  // A markupsafe.Markup: text marked safe by |safe or |escape. Adding plain
  // text to it HTML-escapes that text, as Python's Markup.__add__ does.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.flavor_ = Flavor::markup;
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_real() const { return kind_ == Kind::real; }
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::real || kind_ == Kind::boolean; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_function() const { return kind_ == Kind::function; }
  bool is_generator() const { return flavor_ == Flavor::generator; }
  bool is_tuple() const { return flavor_ == Flavor::tuple; }
  bool is_markup() const { return flavor_ == Flavor::markup; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return kind_ == Kind::real ? int64_t(real_) : int_; }
  double as_real() const { return kind_ == Kind::real ? real_ : double(int_); }
  const std::string& as_string() const { return text_; }
  const List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  const Function& as_function() const { return *function_; }
  // Undefined: what was missing ("'x' is undefined"); function: its name.
  const std::string& hint() const { return text_; }

  bool truthy() const;
  // Python's str() and repr().
  std::string str() const;
  std::string repr() const;
  // The elements a for loop visits: a list's items, a dict's keys, a string's characters.
  List iterate() const;
  // Python's len(); throws for what has none.
  size_t length() const;
  const char* type_name() const;

  // Python ==, and <, which throws across incomparable types.
  friend bool operator==(const Value& a, const Value& b);
  bool less_than(const Value& other) const;

  // JSON text as the values Python's json.loads gives: objects keep their
  // key order (the last of a repeated key wins), integers stay integers.
  static Result<Value> parse_json(const std::string& text);

 private:
  explicit Value(Kind kind) : kind_(kind) {}
  Kind kind_ = Kind::undefined;
  Flavor flavor_ = Flavor::plain;
  int64_t int_ = 0;
  double real_ = 0;
  std::string text_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> function_;
};

// A dict keeps its keys in insertion order; a namespace() is a dict that
// `set ns.attr` may change.
// Keys are strings, as JSON's are, unless a template's dict literal or dict()
// gave another hashable value (an int, float, bool or none, as Python's dict
// takes: {0: 0, 512: 128}); items[i].first is then its text, key(i) the value
// itself (1, 1.0 and true are one key, as in Python).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;

  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
  // Any key; find is nullptr for an unhashable one (a list, a dict), set throws Python's TypeError.
  const Value* find_key(const Value& key) const;
  void set_key(const Value& key, Value value);
  Value key(size_t i) const;
  void clear() {
    items.clear();
    index_.clear();
    typed_index_.clear();
    typed_keys_.clear();
  }

 private:
  std::unordered_map<std::string, size_t> index_;        // string keys
  std::unordered_map<std::string, size_t> typed_index_;  // other keys, by their typed text ("i512", "f0.5", "n")
  std::unordered_map<size_t, Value> typed_keys_;          // entry -> its key, where not a string
};
std::shared_ptr<Dict> make_dict(std::vector<std::pair<std::string, Value>> items = {});

struct CallArgs {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `position` or named `name`, else `fallback`; a name given twice is an error.
  Value get(size_t position, const std::string& name, Value fallback = Value()) const;
  // Refuses positional arguments past `max_positional` and keywords not in `names`.
  void expect(const std::string& callee, size_t max_positional, const std::vector<std::string>& names) const;
};

// Python's repr of a float: the shortest text that reads back as the same double.
std::string format_float(double d);
// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys), as transformers' tojson.
std::string to_json(const Value& v, std::optional<int> indent, std::optional<std::pair<std::string, std::string>> separators,
                    bool sort_keys);

}  // namespace ds::jinja
