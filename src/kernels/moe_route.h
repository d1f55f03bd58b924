#pragma once
// DeepSeekMoE routing: each token's top-k experts and their weights from the
// router's scores (softmax or sigmoid; V3 adds a selection-only bias and
// group-limited routing), as llama.cpp's build_moe_ffn chooses them.

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

// One token: logits [n_expert] -> experts and weights [n_expert_used], by
// descending score, ties to the lower index. bias: [n_expert] added to the
// scores for selection only, or nullptr.
void moe_route(const ExpertRouting& routing, const float* logits, const float* bias, int32_t* experts, float* weights);

}  // namespace ds
