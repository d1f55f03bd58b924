#pragma once
// Which type `dsinfer quantize` writes each tensor in: an ordered list of
// rules, tensor-name glob ('*' matches any run of characters) to a type, the
// first match deciding. A target ("Q8_0", "Q4_K_M", "W8A8", ...) comes with
// llama.cpp-like defaults per architecture; a policy file's rules go ahead of
// them. Vectors (norms, biases) are always written in F32, and the MoE router
// keeps its type: llama.cpp never quantizes them either.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ds {

// What a rule asks for: a GGUF type, W8A8 (per-output-channel int8 with
// per-token int8 activations: an I8 tensor and its row scales; W8A8_ASYM with
// a zero point per row too), or the source's own type.
struct QuantChoice {
  enum Kind { type, w8a8, w8a8_asym, keep } kind = keep;
  bool is_w8a8() const { return kind == w8a8 || kind == w8a8_asym; }
  DType dtype = DType::f32;  // for Kind::type
  bool operator==(const QuantChoice& o) const { return kind == o.kind && (kind != type || dtype == o.dtype); }
};

struct QuantRule {
  std::string pattern;
  QuantChoice choice;
};

// "Q8_0", "w8a8", "keep", ...: a choice by name (case-insensitive); nullopt if none.
std::optional<QuantChoice> parse_quant_choice(const std::string& name);
std::string quant_choice_name(const QuantChoice& choice);
bool glob_match(const std::string& pattern, const std::string& text);

class QuantPolicy {
 public:
  // The defaults of a target on a model with n_layer blocks. Targets: F32,
  // F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_S,
  // Q4_K_M, Q5_K_S, Q5_K_M, W8A8, W8A8_ASYM.
  static Result<QuantPolicy> for_target(const std::string& target, int64_t n_layer);

  // Rules from a file ahead of the current ones: one "PATTERN TYPE" per
  // line, '#' starts a comment; TYPE is a type name, W8A8 or keep.
  Status prepend_file(const std::string& path);

  // The first matching rule's choice; `keep` when none matches.
  QuantChoice choice_for(const std::string& tensor_name) const;

  const std::string& target() const { return target_; }
  const std::vector<QuantRule>& rules() const { return rules_; }
  std::string describe() const;  // the rules, one per line

 private:
  std::string target_;
  std::vector<QuantRule> rules_;
};

// A tensor's group: its name with the block number as '*' ("blk.*.ffn_down.weight").
std::string tensor_group(const std::string& tensor_name);

// The type a row of n_cols elements can take when `wanted` cannot hold it
// (its block does not divide the row), as llama.cpp falls back: the K types
// to a 32-block type, the 32-block types to F16. `wanted` itself when it fits.
DType fallback_type(DType wanted, int64_t n_cols);

}  // namespace ds
