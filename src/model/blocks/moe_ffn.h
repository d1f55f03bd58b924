#pragma once
// DeepSeekMoE: each token goes to its top-k routed experts (kernels/moe_route.h),
// weighted, plus the shared experts every token takes. The backend groups the
// step's tokens by expert (device/backend.h, moe_experts).

#include <cstdint>
#include <string>
#include <vector>

#include "model/blocks/forward_context.h"
#include "model/blocks/gated_ffn.h"
#include "model/device_array.h"

namespace ds {

struct MoeWeights {
  WeightMatrix router;        // [n_expert, n_embd]
  WeightVector router_bias;   // [n_expert] selection bias (V3); empty if none
  std::vector<WeightMatrix> expert_gate, expert_up, expert_down;  // per expert
  FfnWeights shared;          // the shared experts as one gated FFN; absent with none
};

// The MoE keys into c.moe (none without expert_count: a dense model), each relation checked with both keys named.
Status read_moe_config(const ConfigReader& reader, ModelConfig& c);

// A MoE layer's router, stacked experts and shared experts.
Status load_moe(TensorLoader& loader, const ModelConfig& c, const std::string& prefix, MoeWeights* w);

class MoeFfn {
 public:
  Status reserve(Backend& backend, const ModelConfig& c, int64_t n);
  // Zeroes the per-expert token counts (once per step).
  void begin_step(const ModelConfig& c) { expert_tokens_.assign(size_t(c.moe.n_expert), 0); }
  // ctx.out [n, n_embd] from ctx.h; `shared_ffn` runs the shared experts.
  void run(const ForwardContext& ctx, const MoeWeights& w, int64_t n, GatedFfn& shared_ffn) {
    run(ctx, w, n, shared_ffn, ctx.config.moe, 0.0f);
  }
  // The same with the layer's own routing (DeepSeek-V4: its clamp, its hash
  // routing) and the shared experts' clamp.
  void run(const ForwardContext& ctx, const MoeWeights& w, int64_t n, GatedFfn& shared_ffn, const ExpertRouting& routing,
           float shared_limit);
  // Tokens each routed expert took this step, summed over the layers run.
  const std::vector<int64_t>& expert_tokens() const { return expert_tokens_; }

 private:
  DeviceArray router_logits_;  // [n, n_expert]
  DeviceArray shared_out_;     // [n, n_embd]
  std::vector<int64_t> expert_tokens_;
};

}  // namespace ds
