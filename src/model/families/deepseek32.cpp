// DeepSeek-V3.2 (deepseek32): DeepSeek-V3's layers with DeepSeek Sparse
// Attention. Each layer's lightning indexer scores every cached position for
// each query, and MLA attends only to the top_k it picks, gathered
// (kernels/sparse_attention.h). ../shared/DEEPSEEK-V32-V4.md section 2.1:
//
//   c_q = rms_norm(W_qa u)              (MLA's query latent)
//   q_I = W_Iqb c_q                     per indexer head, key_dim wide
//   k_I = layer_norm(W_Ik u)            one per token, cached beside the latent row
//   w   = W_Iproj u / sqrt(key_dim * heads)
//   RoPE on the first n_rot dims of q_I and k_I over the two halves (NeoX),
//   while MLA rotates neighbouring pairs: the two layouts differ on purpose
//   score(t, s) = sum_h w_h * relu(q_I,h · k_I,s), s <= t; top_k positions, ties to the lower
//
// The indexer's keys are the paged cache's second stream (KvRowShape::latent):
// pages, prefix reuse and preemption treat them as MLA's rows. The file's
// multi-token-prediction layers (nextn_predict_layers, counted in
// block_count) are not run.

#include <cmath>

#include "model/device_array.h"
#include "model/families/deepseek2.h"

namespace ds {
namespace {

// The indexer's LayerNorm epsilon: fixed in DeepSeek's code, no key carries it.
constexpr float k_indexer_norm_eps = 1e-6f;

Status read_config(const ConfigReader& r, ModelConfig& c) {
  const std::string& p = r.prefix();
  if (!r.has("attention.head_count_kv") || c.n_head_kv != 1) {
    return Status::error("model: " + p + "attention.head_count_kv must be 1 (MLA's latent rows are one key head), not " +
                         (r.has("attention.head_count_kv") ? std::to_string(c.n_head_kv) : "absent"));
  }
  DS_RETURN_IF_ERROR(r.uint_in("nextn_predict_layers", 0, uint64_t(c.n_layer - 1), &c.n_nextn_layer));
  c.n_layer -= c.n_nextn_layer;
  if (!r.has("attention.key_length_mla")) {
    return Status::error("model: " + p + "attention.key_length_mla is missing: deepseek32 files carry the split attn_k_b/attn_v_b");
  }
  DS_RETURN_IF_ERROR(read_deepseek2_config(r, c));
  if (c.rope.scaling == RopeScaling::yarn) {
    // V3.2's yarn_log_multiplier is 0.1 * mscale_all_dim (m), with mscale 1,
    // as llama.cpp reads it for this family: RoPE's magnitude is (1 + 0.1 ln f)
    // / (1 + 0.1 m ln f), the softmax scale's correction (1 + 0.1 ln f)^2. With
    // m = 1, as in the released configs, both equal deepseek2's.
    auto log_mul = r.bounded_float("rope.scaling.yarn_log_multiplier", 0.0, -10.0, 10.0);
    if (!log_mul.ok()) return log_mul.status();
    const float log_factor = std::log(c.rope.scaling_factor);
    c.rope.yarn_attn_factor = 1.0f / (1.0f + float(log_mul.value()) * log_factor);  // the kernel multiplies by 1 + 0.1 ln f
    const float mscale = 1.0f + 0.1f * log_factor;
    c.mla.kq_scale = mscale * mscale / std::sqrt(float(c.mla.qk_nope_dim + c.mla.qk_rope_dim));
  }
  if (c.mla.q_lora_rank == 0) return Status::error("model: " + p + "attention.q_lora_rank is missing: the indexer reads the query latent");
  if (c.moe.n_expert == 0) return Status::error("model: " + p + "expert_count is missing");
  IndexerConfig& x = c.indexer;
  DS_RETURN_IF_ERROR(r.dim("attention.indexer.head_count", &x.n_head));
  DS_RETURN_IF_ERROR(r.dim("attention.indexer.key_length", &x.key_dim));
  DS_RETURN_IF_ERROR(r.dim("attention.indexer.top_k", &x.top_k));
  // llama.cpp rotates the indexer's keys by a Walsh-Hadamard matrix, which exists for powers of two from 64.
  if (x.key_dim < 64 || (x.key_dim & (x.key_dim - 1)) != 0) {
    return Status::error("model: " + p + "attention.indexer.key_length " + std::to_string(x.key_dim) +
                         " is not a power of two of at least 64");
  }
  if (x.top_k > c.n_ctx_train) {  // more than every position: the choice's buffers would be sized for nothing
    return Status::error("model: " + p + "attention.indexer.top_k " + std::to_string(x.top_k) + " exceeds " + p +
                         "context_length " + std::to_string(c.n_ctx_train));
  }
  if (c.rope.n_rot > x.key_dim) {
    return Status::error("model: " + p + "rope.dimension_count " + std::to_string(c.rope.n_rot) + " exceeds " + p +
                         "attention.indexer.key_length " + std::to_string(x.key_dim));
  }
  c.kv.v_dim = x.key_dim;  // the indexer's keys, beside the latent rows
  return Status();
}

class Deepseek32Layers : public Deepseek2Layers {
 public:
  Deepseek32Layers(const ModelConfig& c, Backend& backend)
      : Deepseek2Layers(c, MlaPrefill::absorbed, backend), indexers_(size_t(c.n_layer)) {}

  Status load(TensorLoader& loader) override {
    DS_RETURN_IF_ERROR(Deepseek2Layers::load(loader));
    const ModelConfig& c = config_;
    const IndexerConfig& x = c.indexer;
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string b = c.block_prefix(i) + "indexer.";
      Indexer& w = indexers_[size_t(i)];
      DS_RETURN_IF_ERROR(loader.vector(b + "k_norm.weight", x.key_dim, &w.k_norm));
      DS_RETURN_IF_ERROR(loader.vector(b + "k_norm.bias", x.key_dim, &w.k_norm_bias));
      DS_RETURN_IF_ERROR(loader.matrix(b + "proj.weight", x.n_head, c.n_embd, &w.proj));
      DS_RETURN_IF_ERROR(loader.matrix(b + "attn_k.weight", x.key_dim, c.n_embd, &w.attn_k));
      DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q_b.weight", x.n_head * x.key_dim, c.mla.q_lora_rank, &w.attn_q_b));
    }
    return Status();
  }

  Status reserve(int64_t n) override {
    DS_RETURN_IF_ERROR(Deepseek2Layers::reserve(n));
    const IndexerConfig& x = config_.indexer;
    DS_RETURN_IF_ERROR(queries_.reserve(backend_, n * x.n_head * x.key_dim));
    DS_RETURN_IF_ERROR(keys_.reserve(backend_, n * x.key_dim));
    DS_RETURN_IF_ERROR(head_weights_.reserve(backend_, n * x.n_head));
    DS_RETURN_IF_ERROR(selected_.reserve(backend_, n * x.top_k));
    return n_selected_.reserve(backend_, n);
  }

 protected:
  void attention(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) override {
    const MlaWeights& w = layers_[size_t(layer)].attention;
    KvLayerView latent = cache.layer(config_.first_block + layer);
    const KvLayerView index_keys{latent.dtype, latent.v, nullptr, latent.page_tokens, config_.indexer.key_dim, 1};
    latent.v = nullptr;
    attention_.project(ctx, w, step, latent);
    select(indexers_[size_t(layer)], ctx, step, index_keys);
    const PositionSelection selection{selected_.data(), n_selected_.data(), config_.indexer.top_k};
    attention_.attend(ctx, w, step, latent, &selection);
  }

 private:
  struct Indexer {
    WeightVector k_norm, k_norm_bias;  // [key_dim]: the keys' LayerNorm
    WeightMatrix proj;                 // [n_head, n_embd]: each head's weight
    WeightMatrix attn_k;               // [key_dim, n_embd]
    WeightMatrix attn_q_b;             // [n_head * key_dim, q_lora_rank]
  };

  // The indexer's keys into the cache and its choice for each token into selected_.
  void select(const Indexer& w, const ForwardContext& ctx, const StepIndex& step, const KvLayerView& index_keys) {
    const ModelConfig& c = config_;
    const IndexerConfig& x = c.indexer;
    Backend& b = ctx.backend;
    const int64_t n = step.n_tokens;
    TraceScope scope(ctx.trace, "indexer");
    ctx.matmul(w.attn_q_b, attention_.query_latent(), n, queries_.data());
    ctx.matmul(w.attn_k, ctx.h, n, keys_.data());
    b.layer_norm(keys_.data(), w.k_norm.data, w.k_norm_bias.data, k_indexer_norm_eps, n, x.key_dim, keys_.data());
    ctx.matmul(w.proj, ctx.h, n, head_weights_.data());
    RopeParams rope = c.rope;
    rope.layout = RopeLayout::neox;
    const HeadRows q{queries_.data(), x.n_head, rope.n_rot, x.n_head * x.key_dim, x.key_dim};
    const HeadRows k{keys_.data(), 1, rope.n_rot, x.key_dim, x.key_dim};
    b.rope_kv_write(rope, step, q, k, index_keys, keys_.data(), nullptr);
    const float weight_scale = 1.0f / std::sqrt(float(x.key_dim * x.n_head));
    b.indexer_select(index_keys, step, queries_.data(), x.n_head, head_weights_.data(), weight_scale, x.top_k, selected_.data(),
                     n_selected_.data());
  }

  std::vector<Indexer> indexers_;
  DeviceArray queries_;       // [n, n_head, key_dim]
  DeviceArray keys_;          // [n, key_dim]
  DeviceArray head_weights_;  // [n, n_head]
  DeviceArrayOf<int32_t> selected_;    // [n, top_k]
  DeviceArrayOf<int32_t> n_selected_;  // [n]
};

Result<std::unique_ptr<LayerStack>> make_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend) {
  if (options.mla_prefill == MlaPrefill::expanded) {
    return Status::error("model: deepseek32 attends to the positions its indexer picks, in the absorbed MLA form only: "
                         "--mla-prefill expanded is not available for it");
  }
  return std::unique_ptr<LayerStack>(new Deepseek32Layers(c, backend));
}

std::vector<BackendOp> layer_ops(const ModelConfig& c) {
  std::vector<BackendOp> ops = deepseek2_layer_ops(c);
  ops.insert(ops.end(), {BackendOp::layer_norm, BackendOp::indexer_select, BackendOp::sparse_attention});
  return ops;
}

}  // namespace

const Family& deepseek32_family() {
  // Split as deepseek2 is; the indexer stays whole on every rank, so that
  // every rank's heads attend to the same chosen positions.
  static const Family family{"deepseek32", RopeLayout::normal, read_config, make_layers, layer_ops, split_deepseek2_config};
  return family;
}

}  // namespace ds
