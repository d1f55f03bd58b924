#include "grammar/grammar.h"

#include <cctype>
#include <map>
#include <optional>
#include <stdexcept>

#include "tokenizer/utf8.h"

namespace ds::grammar {

namespace {

// Bounds that keep a crafted grammar cheap to compile and to match.
constexpr size_t k_max_elements = 1 << 20;
constexpr int k_max_repetition = 1000;
constexpr int k_max_nesting = 128;
constexpr size_t k_max_rules = 1 << 16;

struct Item {
  bool is_rule = false;
  ByteSet bytes;
  uint32_t rule = 0;
};
using Sequence = std::vector<Item>;

}  // namespace

class GbnfParser {
 public:
  explicit GbnfParser(const std::string& text) : s_(text) {}

  Result<Grammar> run() {
    try {
      skip_space();
      while (pos_ < s_.size()) {
        const std::string name = identifier();
        skip_space();
        if (s_.compare(pos_, 3, "::=") != 0) fail("expected '::=' after rule name '" + name + "'");
        pos_ += 3;
        const uint32_t id = rule_id(name);
        if (defined_[id]) fail("rule '" + name + "' is defined twice");
        defined_[id] = true;
        rules_[id] = alternatives(0);
        skip_space();
      }
      for (const auto& [name, id] : ids_) {
        if (!defined_[id]) return Status::error("grammar: rule '" + name + "' is used but never defined");
      }
      const auto root = ids_.find("root");
      if (root == ids_.end()) return Status::error("grammar: there is no 'root' rule");
      check_left_recursion();
      return build(root->second);
    } catch (const std::runtime_error& e) {
      return Status::error(std::string("grammar: ") + e.what());
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) line += s_[i] == '\n';
    throw std::runtime_error("line " + std::to_string(line) + ": " + what);
  }

  void skip_space() {
    for (;;) {
      while (pos_ < s_.size() && std::isspace(uint8_t(s_[pos_]))) ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
        continue;
      }
      return;
    }
  }

  static bool name_char(char c) { return std::isalnum(uint8_t(c)) || c == '-' || c == '_'; }

  std::string identifier() {
    const size_t start = pos_;
    while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return s_.substr(start, pos_ - start);
  }

  // A rule ends where the next `name ::=` begins.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && std::isspace(uint8_t(s_[p]))) ++p;
    return s_.compare(p, 3, "::=") == 0;
  }

  uint32_t rule_id(const std::string& name) {
    const auto [it, inserted] = ids_.emplace(name, uint32_t(rules_.size()));
    if (inserted && rules_.size() >= k_max_rules) fail("the grammar has more than " + std::to_string(k_max_rules) + " rules");
    if (inserted) {
      rules_.emplace_back();
      defined_.push_back(false);
    }
    return it->second;
  }

  uint32_t new_rule(std::vector<Sequence> alternatives) {
    if (rules_.size() >= k_max_rules) fail("the grammar has more than " + std::to_string(k_max_rules) + " rules");
    rules_.push_back(std::move(alternatives));
    defined_.push_back(true);
    return uint32_t(rules_.size() - 1);
  }

  std::vector<Sequence> alternatives(int depth) {
    if (depth > k_max_nesting) fail("groups nest deeper than " + std::to_string(k_max_nesting));
    std::vector<Sequence> alts;
    alts.push_back(sequence(depth));
    skip_space();
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence(depth));
      skip_space();
    }
    return alts;
  }

  Sequence sequence(int depth) {
    Sequence seq;
    for (;;) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] == '|' || s_[pos_] == ')' || at_rule_start()) return seq;
      Sequence item = primary(depth);
      skip_space();
      repetition(item, seq);
    }
  }

  uint32_t codepoint_escape(size_t digits) {
    if (pos_ + digits > s_.size()) fail("a truncated escape");
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char c = s_[pos_++];
      if (!std::isxdigit(uint8_t(c))) fail("a bad hex digit in an escape");
      v = v * 16 + uint32_t(std::isdigit(uint8_t(c)) ? c - '0' : std::tolower(uint8_t(c)) - 'a' + 10);
    }
    return v;
  }

  // One character of a literal or class, as a code point.
  uint32_t character() {
    if (pos_ >= s_.size()) fail("the grammar ends inside a literal or class");
    if (s_[pos_] != '\\') {
      const size_t n = std::min(utf8_sequence_length(uint8_t(s_[pos_])), s_.size() - pos_);
      uint32_t cp = n == 1 ? uint8_t(s_[pos_]) : uint8_t(s_[pos_]) & (0xFF >> (n + 1));
      for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (uint8_t(s_[pos_ + i]) & 0x3F);
      pos_ += n;
      return cp;
    }
    ++pos_;
    if (pos_ >= s_.size()) fail("a truncated escape");
    const char e = s_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'x': return codepoint_escape(2);
      case 'u': return codepoint_escape(4);
      case 'U': return codepoint_escape(8);
      default: return uint8_t(e);  // \\ \" \] \[ \- and the like stand for themselves
    }
  }

  static Item byte_item(uint8_t b) {
    Item it;
    it.bytes.add(b);
    return it;
  }

  static std::string utf8(uint32_t cp) {
    std::string out;
    append_utf8(out, cp);
    return out;
  }

  // A code point range as byte sequences (as regex engines compile UTF-8):
  // split where the encoded length changes, then until every byte but the
  // ranges' own spans is shared.
  void utf8_range(uint32_t lo, uint32_t hi, std::vector<Sequence>& out) {
    for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (lo <= bound && hi > bound) {
        utf8_range(lo, bound, out);
        utf8_range(bound + 1, hi, out);
        return;
      }
    }
    const std::string a = utf8(lo), b = utf8(hi);
    for (size_t i = 1; i < a.size(); ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;  // the bits of the last i bytes
      if ((lo & ~m) != (hi & ~m)) {
        if ((lo & m) != 0) {
          utf8_range(lo, lo | m, out);
          utf8_range((lo | m) + 1, hi, out);
          return;
        }
        if ((hi & m) != m) {
          utf8_range(lo, (hi & ~m) - 1, out);
          utf8_range(hi & ~m, hi, out);
          return;
        }
      }
    }
    Sequence seq;
    for (size_t i = 0; i < a.size(); ++i) {
      Item it;
      it.bytes.add_range(uint8_t(a[i]), uint8_t(b[i]));
      seq.push_back(it);
    }
    out.push_back(seq);
  }

  Sequence char_class() {
    ++pos_;  // [
    const bool negated = pos_ < s_.size() && s_[pos_] == '^';
    if (negated) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (pos_ < s_.size() && s_[pos_] != ']') {
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = character();
      }
      if (hi < lo) fail("a character range runs backwards");
      ranges.emplace_back(lo, hi);
    }
    if (pos_ >= s_.size()) fail("a character class is never closed");
    ++pos_;
    Item ascii;
    std::vector<Sequence> wide;
    for (auto [lo, hi] : ranges) {
      if (lo <= 0x7F) ascii.bytes.add_range(uint8_t(lo), uint8_t(std::min<uint32_t>(hi, 0x7F)));
      if (hi > 0x7F) {
        if (negated) fail("a negated class may exclude only ASCII characters");
        utf8_range(std::max<uint32_t>(lo, 0x80), hi, wide);
      }
    }
    if (negated) {
      Item it;
      for (int b = 0; b < 256; ++b) {
        if (!ascii.bytes.has(uint8_t(b))) it.bytes.add(uint8_t(b));
      }
      return {it};
    }
    if (wide.empty()) return {ascii};
    if (ascii.bytes.bits != ByteSet{}.bits) wide.push_back({ascii});
    Item ref;
    ref.is_rule = true;
    ref.rule = new_rule(std::move(wide));
    return {ref};
  }

  Sequence primary(int depth) {
    const char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      Sequence seq;
      while (pos_ < s_.size() && s_[pos_] != '"') {
        for (const char b : utf8(character())) seq.push_back(byte_item(uint8_t(b)));
      }
      if (pos_ >= s_.size()) fail("a literal is never closed");
      ++pos_;
      return seq;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      Item any;
      any.bytes.add_range(0, 255);
      return {any};
    }
    if (c == '(') {
      ++pos_;
      std::vector<Sequence> alts = alternatives(depth + 1);
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ')') fail("expected ')'");
      ++pos_;
      if (alts.size() == 1) return alts[0];
      Item ref;
      ref.is_rule = true;
      ref.rule = new_rule(std::move(alts));
      return {ref};
    }
    if (name_char(c)) {
      Item ref;
      ref.is_rule = true;
      ref.rule = rule_id(identifier());
      return {ref};
    }
    fail(std::string("unexpected '") + c + "'");
  }

  int number() {
    const size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(uint8_t(s_[pos_]))) ++pos_;
    if (pos_ == start) fail("expected a number in {m,n}");
    if (pos_ - start > 6) fail("a repetition count is too large");
    return std::stoi(s_.substr(start, pos_ - start));
  }

  // item*, item+, item?, item{m,n}: appended to seq, helper rules made as needed.
  void repetition(const Sequence& item, Sequence& seq) {
    int min = 1, max = 1;
    if (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?')) {
      const char op = s_[pos_++];
      min = op == '+' ? 1 : 0;
      max = op == '?' ? 1 : -1;
    } else if (pos_ < s_.size() && s_[pos_] == '{') {
      ++pos_;
      skip_space();
      min = number();
      max = min;
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        skip_space();
        max = pos_ < s_.size() && s_[pos_] == '}' ? -1 : number();
        skip_space();
      }
      if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}'");
      ++pos_;
      if (min > k_max_repetition || max > k_max_repetition || (max >= 0 && max < min)) fail("a bad {m,n} repetition");
    }
    if (seq.size() + item.size() * size_t(std::max(min, 1)) > k_max_elements) fail("the grammar is too large");
    // Copies made for repetitions count against the whole grammar's size before they are made.
    const size_t copies = size_t(std::max(min, 1)) + size_t(max > min ? max - min : 1);
    if ((total_items_ += item.size() * copies) > k_max_elements) fail("the grammar is too large");
    for (int i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (max == min) return;
    Item ref;
    ref.is_rule = true;
    if (max < 0) {  // R ::= item R | ""
      ref.rule = new_rule({});
      Sequence again = item;
      again.push_back(ref);
      rules_[ref.rule] = {again, {}};
    } else {  // (max - min) nested optionals: R_k ::= item R_{k+1} | ""
      uint32_t next = 0;
      bool has_next = false;
      for (int k = max - min; k > 0; --k) {
        Sequence once = item;
        if (has_next) {
          Item n;
          n.is_rule = true;
          n.rule = next;
          once.push_back(n);
        }
        next = new_rule({once, {}});
        has_next = true;
      }
      ref.rule = next;
    }
    seq.push_back(ref);
    if (seq.size() > k_max_elements) fail("the grammar is too large");
  }

  void check_left_recursion() {
    std::vector<bool> nullable(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          bool all = true;
          for (const Item& it : alt) all = all && it.is_rule && nullable[it.rule];
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    // Depth-first over "may start with" edges (a rule referenced before any
    // byte is consumed), iteratively: a chain of rules must not take the stack.
    std::vector<std::vector<uint32_t>> starts(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& alt : rules_[r]) {
        for (const Item& it : alt) {
          if (!it.is_rule) break;
          starts[r].push_back(it.rule);
          if (!nullable[it.rule]) break;
        }
      }
    }
    std::vector<int> state(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
    for (uint32_t r = 0; r < rules_.size(); ++r) {
      if (state[r]) continue;
      std::vector<std::pair<uint32_t, size_t>> path = {{r, 0}};
      state[r] = 1;
      while (!path.empty()) {
        auto& [rule, next] = path.back();
        if (next == starts[rule].size()) {
          state[rule] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t to = starts[rule][next++];
        if (state[to] == 1) throw std::runtime_error("a rule reaches itself before consuming input (left recursion)");
        if (state[to] == 0) {
          state[to] = 1;
          path.emplace_back(to, 0);
        }
      }
    }
  }

  Grammar build(uint32_t root) {
    Grammar g;
    g.root_ = root;
    std::map<std::array<uint64_t, 4>, uint32_t> set_index;
    g.alternatives_.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& alt : rules_[r]) {
        g.alternatives_[r].push_back(uint32_t(g.elements_.size()));
        for (const Item& it : alt) {
          if (it.is_rule) {
            g.elements_.push_back({Element::Kind::rule, it.rule});
            continue;
          }
          const auto [at, added] = set_index.emplace(it.bytes.bits, uint32_t(g.byte_sets_.size()));
          if (added) g.byte_sets_.push_back(it.bytes);
          g.elements_.push_back({Element::Kind::bytes, at->second});
        }
        g.elements_.push_back({Element::Kind::end, 0});
        if (g.elements_.size() > k_max_elements) throw std::runtime_error("the grammar is too large");
      }
    }
    return g;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::map<std::string, uint32_t> ids_;
  size_t total_items_ = 0;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<bool> defined_;
};

Result<Grammar> Grammar::from_gbnf(const std::string& text) { return GbnfParser(text).run(); }

}  // namespace ds::grammar
