#pragma once
// Rotary position embedding, with the scalings GGUF metadata can ask for.

#include <cstdint>

#include "tensor/rope_params.h"

namespace ds {

// The YaRN ramp of pair dimension i0 (even): 1 below corr_low, 0 above corr_high.
float rope_yarn_ramp(float low, float high, int i0);

// Rotates x: [n_tokens, n_heads, head_dim] in place; token t is at positions[t].
// n_ctx_current is the longest context in the batch, used by dynamic NTK.
void rope(const RopeParams& params, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* positions, int64_t n_ctx_current);

// The same over heads laid out with strides: element i of head h of token t
// at x[t * token_stride + h * head_stride + i] (the RoPE part of a wider row).
void rope_strided(const RopeParams& params, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                  int64_t token_stride, int64_t head_stride, const int32_t* positions, int64_t n_ctx_current);

}  // namespace ds
