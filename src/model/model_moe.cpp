// DeepSeekMoE: each token goes to its top-k routed experts (kernels/moe_route.h),
// weighted, plus the shared experts every token takes. The backend groups the
// step's tokens by expert (device/backend.h, moe_experts).

#include "model/model.h"

namespace ds {

void Model::moe_ffn_block(int64_t layer, int64_t n) {
  const ModelConfig& c = config_;
  const MoeConfig& moe = c.moe;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  rms_norm_rows(x_.data(), w.ffn_norm, n, c.n_embd, c.n_embd, h_.data());

  traced_matmul(w.router, h_.data(), n, router_logits_.data());
  if (int64_t(expert_tokens_.size()) != moe.n_expert || layer == moe.leading_dense) expert_tokens_.assign(size_t(moe.n_expert), 0);
  {
    TraceScope scope(trace_, "moe_experts", dtype_name(w.expert_gate[0].type));
    const ExpertWeights experts{w.expert_gate.data(), w.expert_up.data(), w.expert_down.data()};
    backend_->moe_experts(moe, router_logits_.data(), w.router_bias.data, experts, h_.data(), n, proj_.data(), expert_tokens_.data());
  }
  if (moe.n_expert_shared > 0) {
    gated_ffn(w.w_gate, w.w_up, w.w_down, h_.data(), n, shared_out_.data());
    TraceScope scope(trace_, "add");
    backend_->add(proj_.data(), shared_out_.data(), n * c.n_embd);
  }
  residual_add(proj_.data(), n);
}

}  // namespace ds
