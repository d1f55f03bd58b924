#pragma once
// How DeepSeekMoE chooses a token's experts (the parameters every backend's
// routing takes; kernels/moe_route.h computes it on the CPU).

#include <cstdint>

namespace ds {

enum class ExpertGating { softmax, sigmoid };

struct ExpertRouting {
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  ExpertGating gating = ExpertGating::softmax;
  bool normalize_weights = false;
  float weights_scale = 1.0f;
  int64_t n_group = 1;       // group-limited routing: experts in n_group groups ...
  int64_t n_group_used = 1;  // ... of which the best n_group_used may be chosen
};

}  // namespace ds
