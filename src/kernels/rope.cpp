#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ds {
namespace {

// The dimension at which the rotation's wavelength spans n_rotations turns of the original context.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rotations, float base) {
  return float(n_dims) * std::log(float(n_ctx_orig) / (n_rotations * 2.0f * float(M_PI))) / (2.0f * std::log(base));
}

}  // namespace

float rope_yarn_ramp(float low, float high, int i0) {
  const float y = (float(i0 / 2) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

RopeFactors rope_factors(const RopeParams& p, int64_t n_ctx_current) {
  RopeFactors f;
  float base = p.freq_base;
  switch (p.scaling) {
    case RopeScaling::none: break;
    case RopeScaling::linear: f.freq_scale = 1.0f / p.scaling_factor; break;
    case RopeScaling::yarn: {
      f.freq_scale = 1.0f / p.scaling_factor;
      f.ext_factor = p.yarn_ext_factor;
      f.corr_low = std::max(0.0f, std::floor(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.yarn_beta_fast, base)));
      f.corr_high = std::min(float(p.n_rot - 1), std::ceil(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.yarn_beta_slow, base)));
      f.mscale = p.yarn_attn_factor;
      if (f.ext_factor != 0.0f) f.mscale *= 1.0f + 0.1f * std::log(1.0f / f.freq_scale);
      break;
    }
    case RopeScaling::dynamic_ntk:
      // Grows the base once the context passes the trained length (HF's DynamicNTK).
      if (n_ctx_current > p.n_ctx_orig && p.n_ctx_orig > 0) {
        const double ratio = p.scaling_factor * double(n_ctx_current) / p.n_ctx_orig - (p.scaling_factor - 1.0);
        base = float(double(base) * std::pow(ratio, double(p.n_rot) / double(p.n_rot - 2)));
      }
      break;
  }
  f.theta_scale = std::pow(base, -2.0f / float(p.n_rot));
  return f;
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
      const float theta_interp = f.freq_scale * theta_extrap;
      float theta = theta_interp;
      if (f.ext_factor != 0.0f) {
        const float mix = rope_yarn_ramp(f.corr_low, f.corr_high, i0) * f.ext_factor;
        theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
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
