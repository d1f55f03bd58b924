#pragma once
// Rotary position embedding's parameters, as GGUF metadata gives them, and
// the factors they come to for a step: every backend rotates with these.

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
  // Llama 3's frequency factors (the file's rope_freqs.weight): pair i's angle is divided by
  // freq_factors[i] before the scaling, as ggml's rope does; n_rot / 2 floats in the backend's
  // memory, or none.
  const float* freq_factors = nullptr;
};

// What the scaling makes of the rotation for a batch whose longest context is
// n_ctx_current: pair i of a token at position p turns by theta_i, where
// theta_extrap = p * theta_scale^i (a running product, one float multiply per
// pair), theta = freq_scale * theta_extrap, mixed back toward theta_extrap by
// the YaRN ramp between corr_low and corr_high (times ext_factor), and the
// result is scaled by mscale. Every backend rotates with these same factors.
struct RopeFactors {
  float theta_scale = 1.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float mscale = 1.0f;
  float corr_low = 0.0f, corr_high = 0.0f;
};
RopeFactors rope_factors(const RopeParams& params, int64_t n_ctx_current);

}  // namespace ds
