#pragma once
// How DeepSeekMoE chooses a token's experts (the parameters every backend's
// routing takes; kernels/moe_route.h computes it on the CPU).

#include <cstdint>

namespace ds {

// sqrt_softplus: DeepSeek-V4's sqrt(softplus(logit)).
enum class ExpertGating { softmax, sigmoid, sqrt_softplus };

inline const char* expert_gating_name(ExpertGating g) {
  return g == ExpertGating::softmax ? "softmax" : g == ExpertGating::sigmoid ? "sigmoid" : "sqrt-softplus";
}

struct ExpertRouting {
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  ExpertGating gating = ExpertGating::softmax;
  bool normalize_weights = false;
  float weights_scale = 1.0f;
  int64_t n_group = 1;       // group-limited routing: experts in n_group groups ...
  int64_t n_group_used = 1;  // ... of which the best n_group_used may be chosen
  // DeepSeek-V4: each expert's SwiGLU reads silu(min(gate, limit)) * clamp(up, -limit, limit); 0: unclamped.
  float swiglu_limit = 0.0f;
  // DeepSeek-V4's hash-routed layers: [n_tokens, n_expert_used] experts per
  // token of the step (in the backend's memory), chosen by token id instead of
  // by score; their weights still come from the scores. Null: top-k by score.
  const int32_t* forced_experts = nullptr;
};

}  // namespace ds
