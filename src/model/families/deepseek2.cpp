// DeepSeek-V2, V3 and R1 (deepseek2): pre-norm layers of multi-head latent
// attention (model/blocks/mla_attention.h); the first leading_dense_block_count
// layers have a dense gated FFN, the rest DeepSeekMoE (model/blocks/moe_ffn.h:
// V2's softmax routing, V3's sigmoid with a selection bias and groups).

#include "model/families/deepseek2.h"

#include <algorithm>

namespace ds {

Status read_deepseek2_config(const ConfigReader& r, ModelConfig& c) {
  DS_RETURN_IF_ERROR(r.dim("feed_forward_length", &c.n_ff));  // the leading dense layers'
  DS_RETURN_IF_ERROR(read_mla_config(r, c));
  return read_moe_config(r, c);
}

Status split_deepseek2_config(ModelConfig& c) {
  const int ranks = c.ranks.ranks;
  const std::string arch = c.arch_name();
  // The heads' queries and up-projections are split; the latent row each
  // token caches is every head's, so every rank keeps it whole.
  // The shared experts' width is divided; the routed experts are divided
  // whole under expert parallel (their count must divide, TensorLoader::slices
  // checks), else each one's width.
  std::vector<std::pair<const char*, int64_t*>> widths = {
      {"attention.head_count", &c.n_head}, {"feed_forward_length", &c.n_ff}, {"expert_shared_count x expert_feed_forward_length", &c.moe.shared_ff}};
  if (!c.ranks.experts_whole) widths.push_back({"expert_feed_forward_length", &c.moe.expert_ff});
  for (const auto& [key, value] : widths) {
    if (*value % ranks != 0) {
      return Status::error("tensor parallel: " + arch + "." + key + " " + std::to_string(*value) + " must divide by " + std::to_string(ranks) + " ranks");
    }
  }
  for (const auto& [key, value] : widths) *value /= ranks;
  c.n_head_kv = c.n_head;
  return Status();
}

Status Deepseek2Layers::load(TensorLoader& loader) {
  const ModelConfig& c = config_;
  std::vector<const MlaWeights*> attention;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string b = c.block_prefix(i);
    Layer& l = layers_[size_t(i)];
    DS_RETURN_IF_ERROR(loader.vector(b + "attn_norm.weight", c.n_embd, &l.attn_norm));
    DS_RETURN_IF_ERROR(loader.vector(b + "ffn_norm.weight", c.n_embd, &l.ffn_norm));
    DS_RETURN_IF_ERROR(load_mla(loader, c, b, &l.attention));
    attention.push_back(&l.attention);
    if (c.moe.is_moe_layer(i)) {
      DS_RETURN_IF_ERROR(load_moe(loader, c, b, &l.moe));
    } else {
      DS_RETURN_IF_ERROR(load_ffn(loader, b, "", c.n_ff, c.n_embd, &l.ffn));
    }
  }
  return attention_.configure(backend_, attention);
}

Status Deepseek2Layers::reserve(int64_t n) {
  const ModelConfig& c = config_;
  DS_RETURN_IF_ERROR(attention_.reserve(backend_, n));
  if (c.moe.n_expert > 0) DS_RETURN_IF_ERROR(moe_.reserve(backend_, c, n));
  // One gated FFN's workspace serves the dense layers and the shared experts.
  return ffn_.reserve(backend_, n, std::max(c.n_ff, c.moe.shared_ff));
}

void Deepseek2Layers::begin_step(const Batch& batch) {
  attention_.plan(batch);
  moe_.begin_step(config_);
}

void Deepseek2Layers::attention(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) {
  attention_.run(ctx, layers_[size_t(layer)].attention, step, cache.layer(config_.first_block + layer));
}

void Deepseek2Layers::run_layer(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) {
  const Layer& l = layers_[size_t(layer)];
  const int64_t n = step.n_tokens;
  ctx.pre_norm_residual(l.attn_norm, n, [&] { attention(layer, ctx, step, cache); });
  ctx.pre_norm_residual(l.ffn_norm, n, [&] {
    if (config_.moe.is_moe_layer(layer)) {
      moe_.run(ctx, l.moe, n, ffn_);
    } else {
      ffn_.run(ctx, l.ffn, ctx.h, n, ctx.out);
    }
  });
}

std::vector<BackendOp> deepseek2_layer_ops(const ModelConfig& c) {
  std::vector<BackendOp> ops = {BackendOp::rms_norm,       BackendOp::matmul,          BackendOp::matmul_batched,
                                BackendOp::copy_heads,     BackendOp::rope_kv_write,   BackendOp::paged_attention,
                                BackendOp::silu_mul,       BackendOp::add};
  if (c.moe.n_expert > 0) ops.push_back(BackendOp::moe_experts);
  return ops;
}

namespace {

Result<std::unique_ptr<LayerStack>> make_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend) {
  return std::unique_ptr<LayerStack>(new Deepseek2Layers(c, options.mla_prefill, backend));
}

}  // namespace

const Family& deepseek2_family() {
  static const Family family{"deepseek2", RopeLayout::normal, read_deepseek2_config, make_layers, deepseek2_layer_ops,
                             split_deepseek2_config};
  return family;
}

}  // namespace ds
