#include "quant/quant_policy.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace ds {
namespace {

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

QuantChoice of(DType t) { return {QuantChoice::type, t}; }

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third one between.
bool more_bits_layer(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

}  // namespace

std::optional<QuantChoice> parse_quant_choice(const std::string& name) {
  const std::string n = upper(name);
  if (n == "KEEP") return QuantChoice{QuantChoice::keep};
  if (n == "W8A8") return QuantChoice{QuantChoice::w8a8};
  if (n == "W8A8_ASYM") return QuantChoice{QuantChoice::w8a8_asym};
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                  DType::q4_k, DType::q5_k, DType::q6_k, DType::mxfp4}) {
    if (n == dtype_name(t)) return of(t);
  }
  return std::nullopt;
}

std::string quant_choice_name(const QuantChoice& choice) {
  switch (choice.kind) {
    case QuantChoice::keep: return "keep";
    case QuantChoice::w8a8: return "W8A8";
    case QuantChoice::w8a8_asym: return "W8A8_ASYM";
    case QuantChoice::type: return dtype_name(choice.dtype);
  }
  return "";
}

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative wildcard match: on a mismatch, let the last '*' take one more character.
  size_t p = 0, t = 0, star = std::string::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p, ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Result<QuantPolicy> QuantPolicy::for_target(const std::string& target, int64_t n_layer) {
  QuantPolicy policy;
  policy.target_ = upper(target);
  const std::string& t = policy.target_;
  auto add = [&](std::string pattern, QuantChoice choice) { policy.rules_.push_back({std::move(pattern), choice}); };
  add("*ffn_gate_inp.weight", {QuantChoice::keep});  // the MoE router: its scores pick the experts
  if (t == "W8A8" || t == "W8A8_ASYM") {
    // Embeddings, output and attention stay in the source's 16/32 bits; the
    // dense FFN, shared experts and routed experts go to INT8.
    add("token_embd.weight", {QuantChoice::keep});
    add("output.weight", {QuantChoice::keep});
    add("blk.*.attn_*", {QuantChoice::keep});
    add("blk.*.ffn_*", {t == "W8A8" ? QuantChoice::w8a8 : QuantChoice::w8a8_asym});
    return policy;
  }
  if (t == "MXFP4_MOE") {  // llama.cpp's MOSTLY_MXFP4_MOE: the routed experts in MXFP4 (V4-Flash's), every other matrix Q8_0
    add("blk.*_exps.weight", of(DType::mxfp4));
    add("*.weight", of(DType::q8_0));
    return policy;
  }
  const bool k_mix = t == "Q4_K_M" || t == "Q4_K_S" || t == "Q5_K_M" || t == "Q5_K_S";
  std::optional<QuantChoice> base = k_mix ? parse_quant_choice(t.substr(0, 4)) : parse_quant_choice(t);
  if (!base || base->kind != QuantChoice::type)
    return Status::error("unknown quantization type '" + target + "' (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, "
                         "Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, MXFP4, MXFP4_MOE, W8A8, W8A8_ASYM)");
  const bool float_target = base->dtype == DType::f32 || base->dtype == DType::f16 || base->dtype == DType::bf16;
  // The output matrix decides every token: llama.cpp gives it Q6_K under any lower type.
  if (!float_target && base->dtype != DType::q8_0 && base->dtype != DType::q6_k) add("output.weight", of(DType::q6_k));
  // The _M mixes give attn_v and ffn_down Q6_K in llama.cpp's use_more_bits
  // layers; Q4_K_S gives Q5_K to the first four attn_v and the first eighth's ffn_down.
  for (int64_t layer = 0; layer < n_layer; ++layer) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    if ((t == "Q4_K_M" || t == "Q5_K_M") && more_bits_layer(layer, n_layer)) {
      add(b + "attn_v.weight", of(DType::q6_k));
      add(b + "ffn_down.weight", of(DType::q6_k));
    }
    if (t == "Q4_K_S" && layer < 4) add(b + "attn_v.weight", of(DType::q5_k));
    if (t == "Q4_K_S" && layer < n_layer / 8) add(b + "ffn_down.weight", of(DType::q5_k));
  }
  add("*.weight", *base);
  return policy;
}

Status QuantPolicy::prepend_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::error("cannot read policy file " + path);
  std::vector<QuantRule> rules;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string pattern, type, extra;
    if (!(words >> pattern)) continue;
    const std::string where = path + " line " + std::to_string(number);
    if (!(words >> type) || (words >> extra)) return Status::error(where + ": expected 'PATTERN TYPE'");
    auto choice = parse_quant_choice(type);
    if (!choice) return Status::error(where + ": unknown type '" + type + "'");
    rules.push_back({pattern, *choice});
  }
  rules_.insert(rules_.begin(), rules.begin(), rules.end());
  return Status();
}

QuantChoice QuantPolicy::choice_for(const std::string& tensor_name) const {
  for (const QuantRule& r : rules_) {
    if (glob_match(r.pattern, tensor_name)) return r.choice;
  }
  return {QuantChoice::keep};
}

std::string QuantPolicy::describe() const {
  std::string out;
  for (const QuantRule& r : rules_) out += r.pattern + " " + quant_choice_name(r.choice) + "\n";
  return out;
}

std::string tensor_group(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return name;
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? name : "blk.*" + name.substr(dot);
}

DType fallback_type(DType wanted, int64_t n_cols) {
  const int64_t block = dtype_traits(wanted).block_elements;
  if (n_cols % block == 0) return wanted;
  switch (wanted) {
    case DType::q4_k: return fallback_type(DType::q5_0, n_cols);
    case DType::q5_k: return fallback_type(DType::q5_1, n_cols);
    case DType::q6_k: return fallback_type(DType::q8_0, n_cols);
    default: return DType::f16;
  }
}

}  // namespace ds
