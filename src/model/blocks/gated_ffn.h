#pragma once
// The gated feed-forward block (SwiGLU): out = down(silu(gate(in)) * up(in)).
// A dense layer's FFN, and DeepSeekMoE's shared experts.

#include <cstdint>
#include <string>

#include "model/blocks/forward_context.h"
#include "model/device_array.h"

namespace ds {

struct FfnWeights {
  WeightMatrix gate, up;  // [ff, n_embd]
  WeightMatrix down;      // [n_embd, ff]
};

// blk.N.ffn_{gate,up,down}SUFFIX.weight of width ff; `prefix` is "blk.N.".
// (Under tensor parallel: this rank's part of the width, rows of gate and up, columns of down.)
Status load_ffn(TensorLoader& loader, const std::string& prefix, const std::string& suffix, int64_t ff, int64_t n_embd,
                FfnWeights* w);

class GatedFfn {
 public:
  // For n rows of hidden width up to ff.
  Status reserve(Backend& backend, int64_t n, int64_t ff);
  // out [n, n_embd] from in [n, n_embd]; limit > 0: DeepSeek-V4's clamped SwiGLU (Backend::swiglu).
  void run(const ForwardContext& ctx, const FfnWeights& w, const float* in, int64_t n, float* out, float limit = 0.0f);

 private:
  DeviceArray gate_, up_;  // [n, ff]
};

}  // namespace ds
