#pragma once
// A context-free grammar over bytes, the form constrained decoding runs on,
// read from GBNF (llama.cpp's grammar notation: `root ::= ...`, literals,
// [character classes], ( groups ), | alternatives, * + ? {m,n}, # comments).
// JSON Schema is translated to GBNF first (json_schema.h).
//
// Rules are stored flat: each alternative is a run of elements (a byte set
// or a reference to a rule) closed by an end marker; a position is an index
// into that run. Repetitions become right-recursive helper rules, which the
// matcher follows without growing its stacks.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds::grammar {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(uint8_t(b));
  }
  bool operator==(const ByteSet& o) const { return bits == o.bits; }
};

struct Element {
  enum class Kind : uint8_t { bytes, rule, end };
  Kind kind;
  uint32_t index;  // bytes: into byte_sets; rule: the rule's id
};

class Grammar {
 public:
  // Errors name the line and what was expected; an undefined rule, a rule
  // that reaches itself without consuming a byte (left recursion) and a
  // grammar without `root` are refused.
  static Result<Grammar> from_gbnf(const std::string& text);

  const std::vector<Element>& elements() const { return elements_; }
  const ByteSet& byte_set(uint32_t index) const { return byte_sets_[index]; }
  // The positions where each alternative of rule r starts.
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alternatives_[rule]; }
  uint32_t root() const { return root_; }
  size_t n_rules() const { return alternatives_.size(); }

 private:
  friend class GbnfParser;
  std::vector<Element> elements_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<uint32_t>> alternatives_;
  uint32_t root_ = 0;
};

}  // namespace ds::grammar
