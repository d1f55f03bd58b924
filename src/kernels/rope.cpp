#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ds {

float rope_yarn_ramp(float low, float high, int i0) {
  const float y = (float(i0 / 2) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

void rope(const RopeParams& p, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* positions, int64_t n_ctx_current) {
  rope_strided(p, x, n_tokens, n_heads, head_dim, n_heads * head_dim, head_dim, positions, n_ctx_current);
}

void rope_strided(const RopeParams& p, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                  int64_t token_stride, int64_t head_stride, const int32_t* positions, int64_t n_ctx_current) {
  const RopeFactors f = rope_factors(p, n_ctx_current);
  // Per-thread tables: rope runs once per layer per chunk, and must not allocate each time.
  thread_local std::vector<float> cos_table, sin_table;
  cos_table.resize(size_t(p.n_rot / 2));
  sin_table.resize(size_t(p.n_rot / 2));
  for (int64_t t = 0; t < n_tokens; ++t) {
    float theta_extrap = float(positions[t]);
    for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
      const float extrap = p.freq_factors ? theta_extrap / p.freq_factors[i0 / 2] : theta_extrap;
      const float theta_interp = f.freq_scale * extrap;
      float theta = theta_interp;
      if (f.ext_factor != 0.0f) {
        const float mix = rope_yarn_ramp(f.corr_low, f.corr_high, i0) * f.ext_factor;
        theta = theta_interp * (1.0f - mix) + extrap * mix;
      }
      cos_table[i0 / 2] = std::cos(theta) * f.mscale;
      sin_table[i0 / 2] = std::sin(theta) * f.mscale;
      theta_extrap *= f.theta_scale;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * token_stride + h * head_stride;
      const int half = p.n_rot / 2;
      for (int i = 0; i < half; ++i) {
        const int a = p.layout == RopeLayout::normal ? 2 * i : i;
        const int b = p.layout == RopeLayout::normal ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cos_table[i] - x1 * sin_table[i];
        v[b] = x0 * sin_table[i] + x1 * cos_table[i];
      }
    }
  }
}

}  // namespace ds
