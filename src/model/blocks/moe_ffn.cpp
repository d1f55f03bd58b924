#include "model/blocks/moe_ffn.h"

#include <algorithm>

namespace ds {

Status read_moe_config(const ConfigReader& r, ModelConfig& c) {
  MoeConfig& moe = c.moe;
  DS_RETURN_IF_ERROR(r.optional_dim("expert_count", &moe.n_expert));
  if (moe.n_expert == 0) return Status();
  DS_RETURN_IF_ERROR(r.dim("expert_used_count", &moe.n_expert_used));
  DS_RETURN_IF_ERROR(r.dim("expert_feed_forward_length", &moe.expert_ff));
  DS_RETURN_IF_ERROR(r.optional_dim("expert_shared_count", &moe.n_expert_shared));
  moe.shared_ff = moe.n_expert_shared * moe.expert_ff;
  DS_RETURN_IF_ERROR(r.uint_in("leading_dense_block_count", 0, uint64_t(c.n_layer), &moe.leading_dense));
  int64_t gating = 0;
  DS_RETURN_IF_ERROR(r.uint_in("expert_gating_func", 1, UINT64_MAX, &gating));
  if (gating != 1 && gating != 2) {
    return Status::error("model: " + r.prefix() + "expert_gating_func " + std::to_string(uint64_t(gating)) +
                         " is not softmax (1) or sigmoid (2)");
  }
  moe.gating = gating == 2 ? ExpertGating::sigmoid : ExpertGating::softmax;
  DS_RETURN_IF_ERROR(r.optional_bool("expert_weights_norm", &moe.normalize_weights));
  auto scale = r.bounded_float("expert_weights_scale", 1.0, 0.0, 1e6);
  if (!scale.ok()) return scale.status();
  moe.weights_scale = scale.value() == 0.0 ? 1.0f : float(scale.value());
  // A group count of 0 means no grouping (one group), as llama.cpp reads it.
  auto groups = r.file().get_uint_or(r.prefix() + "expert_group_count", 1);
  auto groups_used = r.file().get_uint_or(r.prefix() + "expert_group_used_count", 1);
  if (!groups.ok()) return groups.status();
  if (!groups_used.ok()) return groups_used.status();
  const auto clamp = [](uint64_t v) { return std::max<int64_t>(1, int64_t(std::min<uint64_t>(v, uint64_t(ConfigReader::k_max_dim)))); };
  moe.n_group = clamp(groups.value());
  moe.n_group_used = clamp(groups_used.value());
  const std::string& p = r.prefix();
  const std::string experts = p + "expert_count " + std::to_string(moe.n_expert);
  const std::string used = p + "expert_used_count " + std::to_string(moe.n_expert_used);
  const std::string n_groups = p + "expert_group_count " + std::to_string(moe.n_group);
  const std::string n_groups_used = p + "expert_group_used_count " + std::to_string(moe.n_group_used);
  if (moe.n_expert_used > moe.n_expert) return Status::error("model: " + used + " exceeds " + experts);
  if (moe.n_expert % moe.n_group != 0) return Status::error("model: " + experts + " is not a multiple of " + n_groups);
  if (moe.n_group_used > moe.n_group) return Status::error("model: " + n_groups_used + " exceeds " + n_groups);
  if (moe.n_expert_used > moe.n_group_used * (moe.n_expert / moe.n_group)) {
    return Status::error("model: " + used + " exceeds the experts of " + n_groups_used + " of " + n_groups + " (" + experts + ")");
  }
  return Status();
}

Status load_moe(TensorLoader& loader, const ModelConfig& c, const std::string& b, MoeWeights* w) {
  const MoeConfig& moe = c.moe;
  DS_RETURN_IF_ERROR(loader.matrix(b + "ffn_gate_inp.weight", moe.n_expert, c.n_embd, &w->router));
  DS_RETURN_IF_ERROR(loader.vector(b + "exp_probs_b.bias", moe.n_expert, &w->router_bias, true));
  // Under tensor parallel each expert is split as a dense FFN is (model/blocks/gated_ffn.h),
  // or, expert parallel, each rank holds its part of the experts whole.
  const bool whole = c.ranks.experts_whole;
  DS_RETURN_IF_ERROR(loader.slices(b + "ffn_gate_exps.weight", moe.n_expert, moe.expert_ff, c.n_embd, &w->expert_gate,
                                   whole ? Split::slices : Split::rows));
  DS_RETURN_IF_ERROR(loader.slices(b + "ffn_up_exps.weight", moe.n_expert, moe.expert_ff, c.n_embd, &w->expert_up,
                                   whole ? Split::slices : Split::rows));
  DS_RETURN_IF_ERROR(loader.slices(b + "ffn_down_exps.weight", moe.n_expert, c.n_embd, moe.expert_ff, &w->expert_down,
                                   whole ? Split::slices : Split::columns));
  if (moe.n_expert_shared == 0) return Status();
  return load_ffn(loader, b, "_shexp", moe.shared_ff, c.n_embd, &w->shared);
}

Status MoeFfn::reserve(Backend& backend, const ModelConfig& c, int64_t n) {
  DS_RETURN_IF_ERROR(router_logits_.reserve(backend, n * c.moe.n_expert));
  return shared_out_.reserve(backend, n * c.n_embd);
}

void MoeFfn::run(const ForwardContext& ctx, const MoeWeights& w, int64_t n, GatedFfn& shared_ffn, const ExpertRouting& routing,
                 float shared_limit) {
  const ModelConfig& c = ctx.config;
  ctx.matmul(w.router, ctx.h, n, router_logits_.data());
  {
    TraceScope scope(ctx.trace, "moe_experts", dtype_name(w.expert_gate[0].type));
    const ExpertWeights experts{w.expert_gate.data(), w.expert_up.data(), w.expert_down.data()};
    ctx.backend.moe_experts(routing, router_logits_.data(), w.router_bias.data, experts, ctx.h, n, ctx.out, expert_tokens_.data());
  }
  if (c.moe.n_expert_shared > 0) {
    shared_ffn.run(ctx, w.shared, ctx.h, n, shared_out_.data(), shared_limit);
    TraceScope scope(ctx.trace, "add");
    ctx.backend.add(ctx.out, shared_out_.data(), n * c.n_embd);
  }
}

}  // namespace ds
