#pragma once
// DeepSeekMoE routing: each token's top-k experts and their weights from the
// router's scores (softmax or sigmoid; V3 adds a selection-only bias and
// group-limited routing), as llama.cpp's build_moe_ffn chooses them.

#include <cstdint>

#include "tensor/expert_routing.h"

namespace ds {

// One token: logits [n_expert] -> experts and weights [n_expert_used], by
// descending score, ties to the lower index. bias: [n_expert] added to the
// scores for selection only, or nullptr. forced: the token's experts
// [n_expert_used] chosen already (hash routing), or nullptr.
void moe_route(const ExpertRouting& routing, const float* logits, const float* bias, const int32_t* forced, int32_t* experts,
               float* weights);
// The routing's experts of token t, where they are forced (host memory), else nullptr.
inline const int32_t* forced_experts_of(const ExpertRouting& routing, int64_t t) {
  return routing.forced_experts ? routing.forced_experts + t * routing.n_expert_used : nullptr;
}

}  // namespace ds
