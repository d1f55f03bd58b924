#pragma once
// Rotary position embedding, with the scalings GGUF metadata can ask for.

#include <cstdint>

namespace ds {

enum class RopeLayout {
  normal,  // rotates adjacent pairs (x[2i], x[2i+1]): Llama as converted to GGUF
  neox,    // rotates (x[i], x[i + n_rot/2]): Qwen2 and DeepSeek
};

enum class RopeScaling { none, linear, yarn, dynamic_ntk };

struct RopeParams {
  RopeLayout layout = RopeLayout::normal;
  int n_rot = 0;               // rotated dimensions per head (the first n_rot)
  float freq_base = 10000.0f;
  RopeScaling scaling = RopeScaling::none;
  float scaling_factor = 1.0f;  // context extension factor (>= 1)
  int n_ctx_orig = 0;           // training context before extension
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float yarn_ext_factor = 1.0f;   // 0 disables the YaRN ramp
  float yarn_attn_factor = 1.0f;  // multiplies the YaRN magnitude correction
};

// Rotates x: [n_tokens, n_heads, head_dim] in place; token t is at positions[t].
// n_ctx_current is the longest context in the batch, used by dynamic NTK.
void rope(const RopeParams& params, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* positions, int64_t n_ctx_current);

}  // namespace ds
