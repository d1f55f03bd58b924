#pragma once
// DeepSeekMoE routing: each token's top-k experts and their weights from the
// router's scores (softmax or sigmoid; V3 adds a selection-only bias and
// group-limited routing), as llama.cpp's build_moe_ffn chooses them.

#include <cstdint>

#include "tensor/expert_routing.h"

namespace ds {

// One token: logits [n_expert] -> experts and weights [n_expert_used], by
// descending score, ties to the lower index. bias: [n_expert] added to the
// scores for selection only, or nullptr.
void moe_route(const ExpertRouting& routing, const float* logits, const float* bias, int32_t* experts, float* weights);

}  // namespace ds
