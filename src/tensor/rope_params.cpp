#include "tensor/rope_params.h"

#include <algorithm>
#include <cmath>

namespace ds {
namespace {

// The dimension at which the rotation's wavelength spans n_rotations turns of the original context.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rotations, float base) {
  return float(n_dims) * std::log(float(n_ctx_orig) / (n_rotations * 2.0f * float(M_PI))) / (2.0f * std::log(base));
}

}  // namespace

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

}  // namespace ds
