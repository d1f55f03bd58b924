// DeepSeek-V4 (deepseek4), ../shared/DEEPSEEK-V32-V4.md section 2.2. Each
// token carries four residual streams (hyper-connections): around each
// sublayer a Sinkhorn-mixed combination of them is its input, and its output
// is scaled back into each. Attention has one key head whose keys are its
// values:
//
//   c_q = rms_norm(W_qa u)                q_h = rms_norm(W_qb c_q)_h (no weight)
//   kv  = rms_norm(W_kv u)                RoPE on the last n_rot dims of both
//   keys: the last `window` raw kv rows, plus in a compressing layer the rows
//         its compressor formed (ratio 128: all of them; ratio 4: the lightning
//         indexer's top_k over its own compressed keys)
//   o_h = softmax with the head's sink over those keys, times them; RoPE undone
//   out = W_ob [A_g o_g for each group g of heads]
//
// and the FFN is DeepSeekMoE with sqrt-softplus scores, the first layers
// routed by token id, and a clamped SwiGLU. The layer's KV streams
// (KvRowShape::layer_streams) hold the raw rows, each compressor's per-token
// projections and its rows: all depend only on the prefix, so pages are
// shared, reused and recomputed as the other families' (kernels/kv_compressor.h).
// The file's multi-token-prediction layers are not run.

#include <algorithm>
#include <cmath>

#include "model/blocks/gated_ffn.h"
#include "model/blocks/moe_ffn.h"
#include "model/device_array.h"
#include "model/family.h"

namespace ds {
namespace {

constexpr int64_t k_csa_ratio = 4, k_hca_ratio = 128;
// Per-layer arrays longer than this are refused, as llama.cpp refuses them (LLAMA_MAX_LAYERS).
constexpr size_t k_max_layers = 512;
// The streams of a layer's KV pages, in this order.
enum Stream { k_window = 0, k_state = 1, k_rows = 2, k_index_state = 3, k_index_rows = 4 };

// A per-layer array holds a value for each layer, and no more than a model may have layers.
Status check_per_layer_length(const ConfigReader& r, const std::string& key, const GgufArray& array, int64_t n_layer) {
  if (array.size() >= size_t(n_layer) && array.size() <= k_max_layers) return Status();
  return Status::error("model: " + r.prefix() + key + " has " + std::to_string(array.size()) + " values: fewer than " + r.prefix() +
                       "block_count " + std::to_string(n_layer) + ", or more than " + std::to_string(k_max_layers));
}

// A per-layer f32 array key (or a scalar for every layer) into out.
Status read_per_layer(const ConfigReader& r, const std::string& key, int64_t n_layer, double low, double high,
                      std::vector<float>* out) {
  const std::string name = r.prefix() + key;
  const GgufValue* v = r.file().find(name);
  if (!v) return Status::error("model: " + name + " is missing");
  out->assign(size_t(n_layer), 0.0f);
  if (const auto* array = std::get_if<GgufArray>(&v->data)) {
    DS_RETURN_IF_ERROR(check_per_layer_length(r, key, *array, n_layer));
    for (int64_t i = 0; i < n_layer; ++i) {
      const auto x = array->real(size_t(i));
      if (!x || !std::isfinite(*x) || *x < low || *x > high) return Status::error("model: " + name + "[" + std::to_string(i) + "] is not a number in range");
      (*out)[size_t(i)] = float(*x);
    }
    return Status();
  }
  auto x = r.bounded_float(key, 0.0, low, high);
  if (!x.ok()) return x.status();
  out->assign(size_t(n_layer), float(x.value()));
  return Status();
}

Status read_experts(const ConfigReader& r, ModelConfig& c) {
  const std::string& p = r.prefix();
  MoeConfig& moe = c.moe;
  DS_RETURN_IF_ERROR(r.dim("expert_count", &moe.n_expert));
  DS_RETURN_IF_ERROR(r.dim("expert_used_count", &moe.n_expert_used));
  DS_RETURN_IF_ERROR(r.dim("expert_feed_forward_length", &moe.expert_ff));
  DS_RETURN_IF_ERROR(r.dim("expert_shared_count", &moe.n_expert_shared));
  moe.shared_ff = moe.n_expert_shared * moe.expert_ff;
  if (moe.n_expert_used > moe.n_expert) {
    return Status::error("model: " + p + "expert_used_count " + std::to_string(moe.n_expert_used) + " exceeds " + p + "expert_count " +
                         std::to_string(moe.n_expert));
  }
  int64_t gating = 0;
  DS_RETURN_IF_ERROR(r.uint_in("expert_gating_func", 0, UINT64_MAX, &gating));
  if (gating != 4) {
    return Status::error("model: " + p + "expert_gating_func must be 4 (sqrt-softplus) for deepseek4, not " + std::to_string(gating));
  }
  moe.gating = ExpertGating::sqrt_softplus;
  for (const char* key : {"expert_group_count", "expert_group_used_count"}) {
    int64_t groups = 1;
    DS_RETURN_IF_ERROR(r.uint_in(key, 1, UINT64_MAX, &groups));
    if (groups > 1) return Status::error("model: " + p + key + " " + std::to_string(groups) + ": deepseek4 routes without groups");
  }
  auto weights_norm = r.file().get_bool(p + "expert_weights_norm");
  if (!weights_norm.ok()) return weights_norm.status();
  moe.normalize_weights = weights_norm.value();
  auto scale = r.bounded_float("expert_weights_scale", 0.0, 1e-6, 1e6);
  if (!scale.ok()) return scale.status();
  if (!r.has("expert_weights_scale")) return Status::error("model: " + p + "expert_weights_scale is missing");
  moe.weights_scale = float(scale.value());
  Deepseek4Config& v = c.v4;
  DS_RETURN_IF_ERROR(read_per_layer(r, "swiglu_clamp_exp", c.n_layer, 0.0, 1e6, &v.expert_limit));
  v.shared_limit = v.expert_limit;
  if (r.has("swiglu_clamp_shexp")) DS_RETURN_IF_ERROR(read_per_layer(r, "swiglu_clamp_shexp", c.n_layer, 0.0, 1e6, &v.shared_limit));
  DS_RETURN_IF_ERROR(r.uint_in("hash_layer_count", 0, uint64_t(c.n_layer), &v.hash_layers));
  if (!r.has("hash_layer_count")) return Status::error("model: " + p + "hash_layer_count is missing");
  return Status();
}

Status read_compression(const ConfigReader& r, ModelConfig& c) {
  const std::string& p = r.prefix();
  Deepseek4Config& v = c.v4;
  auto ratios = r.file().get_array(p + "attention.compress_ratios");
  if (!ratios.ok()) return ratios.status();
  DS_RETURN_IF_ERROR(check_per_layer_length(r, "attention.compress_ratios", *ratios.value(), c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const auto ratio = ratios.value()->integer(size_t(i));
    if (!ratio || (*ratio != 0 && *ratio != k_csa_ratio && *ratio != k_hca_ratio)) {
      return Status::error("model: " + p + "attention.compress_ratios[" + std::to_string(i) + "] is not 0, 4 or 128");
    }
    v.compress_ratios.push_back(*ratio);
  }
  // The compressing layers rotate with their own base and YaRN, its magnitude
  // correction cancelled (mscale 1); the window-only layers plainly.
  v.compressed_rope = c.rope;
  auto base = r.bounded_float("attention.compress_rope_freq_base", 0.0, 1.0 + 1e-6, 1e12);
  if (!base.ok()) return base.status();
  if (!r.has("attention.compress_rope_freq_base")) return Status::error("model: " + p + "attention.compress_rope_freq_base is missing");
  v.compressed_rope.freq_base = float(base.value());
  if (c.rope.scaling != RopeScaling::none && c.rope.scaling != RopeScaling::yarn) {
    return Status::error("model: " + p + "rope.scaling.type must be yarn or none for deepseek4");
  }
  if (c.rope.scaling == RopeScaling::yarn) v.compressed_rope.yarn_attn_factor = 1.0f / (1.0f + 0.1f * std::log(c.rope.scaling_factor));
  c.rope.scaling = RopeScaling::none;
  c.rope.scaling_factor = 1.0f;
  return Status();
}

Status read_config(const ConfigReader& r, ModelConfig& c) {
  const std::string& p = r.prefix();
  if (!r.has("attention.head_count_kv") || c.n_head_kv != 1) {
    return Status::error("model: " + p + "attention.head_count_kv must be 1 (one key head, whose keys are its values), not " +
                         (r.has("attention.head_count_kv") ? std::to_string(c.n_head_kv) : "absent"));
  }
  int64_t value_dim = 0;
  DS_RETURN_IF_ERROR(r.dim("attention.key_length", &c.head_dim));
  DS_RETURN_IF_ERROR(r.dim("attention.value_length", &value_dim));
  if (value_dim != c.head_dim) {
    return Status::error("model: " + p + "attention.value_length " + std::to_string(value_dim) + " differs from " + p +
                         "attention.key_length " + std::to_string(c.head_dim) + " (keys are the values)");
  }
  if (!r.has("rope.dimension_count")) return Status::error("model: " + p + "rope.dimension_count is missing");
  DS_RETURN_IF_ERROR(read_rope(r, c.head_dim, c));
  Deepseek4Config& v = c.v4;
  DS_RETURN_IF_ERROR(r.dim("hyper_connection.count", &v.hc_streams));
  if (v.hc_streams != 4) return Status::error("model: " + p + "hyper_connection.count must be 4, not " + std::to_string(v.hc_streams));
  DS_RETURN_IF_ERROR(r.dim("hyper_connection.sinkhorn_iterations", &v.sinkhorn_iterations));
  if (v.sinkhorn_iterations > 1000) return r.out_of_range("hyper_connection.sinkhorn_iterations", uint64_t(v.sinkhorn_iterations));
  auto hc_eps = r.bounded_float("hyper_connection.epsilon", 0.0, 1e-30, 1.0);
  if (!hc_eps.ok()) return hc_eps.status();
  if (!r.has("hyper_connection.epsilon")) return Status::error("model: " + p + "hyper_connection.epsilon is missing");
  v.hc_eps = float(hc_eps.value());
  DS_RETURN_IF_ERROR(r.dim("attention.q_lora_rank", &v.q_lora_rank));
  DS_RETURN_IF_ERROR(r.dim("attention.sliding_window", &v.window));
  DS_RETURN_IF_ERROR(r.dim("attention.output_group_count", &v.o_groups));
  DS_RETURN_IF_ERROR(r.dim("attention.output_lora_rank", &v.o_lora_rank));
  if (c.n_head % v.o_groups != 0) {
    return Status::error("model: " + p + "attention.head_count " + std::to_string(c.n_head) + " is not a multiple of " + p +
                         "attention.output_group_count " + std::to_string(v.o_groups));
  }
  IndexerConfig& x = c.indexer;
  DS_RETURN_IF_ERROR(r.dim("attention.indexer.head_count", &x.n_head));
  DS_RETURN_IF_ERROR(r.dim("attention.indexer.key_length", &x.key_dim));
  DS_RETURN_IF_ERROR(r.dim("attention.indexer.top_k", &x.top_k));
  if (x.key_dim < 64 || (x.key_dim & (x.key_dim - 1)) != 0) {  // llama.cpp's Walsh-Hadamard rotation exists for these only
    return Status::error("model: " + p + "attention.indexer.key_length " + std::to_string(x.key_dim) + " is not a power of two of at least 64");
  }
  if (c.rope.n_rot > x.key_dim) {
    return Status::error("model: " + p + "rope.dimension_count " + std::to_string(c.rope.n_rot) + " exceeds " + p +
                         "attention.indexer.key_length " + std::to_string(x.key_dim));
  }
  DS_RETURN_IF_ERROR(read_compression(r, c));
  DS_RETURN_IF_ERROR(read_experts(r, c));
  int64_t nextn = 0;
  DS_RETURN_IF_ERROR(r.uint_in("nextn_predict_layers", 0, uint64_t(c.n_layer - 1), &nextn));
  c.n_nextn_layer = nextn;
  c.n_layer -= nextn;
  v.compress_ratios.resize(size_t(c.n_layer));
  // Each layer's KV streams (in Stream order). The raw rows and the
  // compressors' per-token state are windowed: a token reads the raw rows of
  // its window, and a row forms from the state of its block (ratio 4: and of
  // the block before); the rows formed are kept. A step reads at most ratio -
  // 1 (2 ratio - 1) projections from before it, so a page keeps a ring of them
  // (KvStream::ring_horizon): ratio 4's 7 rows in a page of 64.
  c.kv.horizon = v.window - 1;
  for (int64_t ratio : v.compress_ratios) {
    std::vector<KvStream> streams = {{c.head_dim, 1, false, /*windowed=*/true}};
    const int64_t projections_horizon = ratio == k_csa_ratio ? 2 * ratio - 1 : ratio - 1;
    if (ratio > 0) {
      const int64_t width = ratio == k_csa_ratio ? 2 * c.head_dim : c.head_dim;
      streams.push_back({2 * width, 1, false, /*windowed=*/true, projections_horizon});
      streams.push_back({c.head_dim, ratio});
      c.kv.horizon = std::max(c.kv.horizon, projections_horizon);
    }
    if (ratio == k_csa_ratio) {
      streams.push_back({4 * x.key_dim, 1, false, /*windowed=*/true, projections_horizon});
      streams.push_back({x.key_dim, k_csa_ratio, /*position_addressed=*/true});  // the indexer reads them
    }
    c.kv.layer_streams.push_back(streams);
  }
  // A ratio-128 row takes a slot in every page of its block: in pages of 64
  // half a slot a page goes unused (V4-Flash: 7,040 bytes a token where the rows
  // need 6,880), in pages of 16 seven eighths (8,000). Pages of 128 would waste
  // none, but a sequence's last 128 positions of raw rows and projections would
  // then take two window pages of 128 (256 positions) where it takes three of 64.
  c.kv.page_tokens = 64;
  return Status();
}

struct Compressor {
  WeightMatrix kv, gate;  // [width, n_embd]
  WeightVector ape;       // [ratio * width]
  WeightVector norm;      // [dim]
};

struct HyperConnection {
  WeightMatrix fn;  // [n_mix, n_streams * n_embd]
  WeightVector base, scale;
};

struct Layer {
  WeightVector attn_norm, ffn_norm, sinks, q_a_norm, kv_norm;
  WeightMatrix q_a, q_b, kv, out_b;
  std::vector<WeightMatrix> out_a;  // per output group [o_lora_rank, heads of the group * head_dim]
  HyperConnection hc_attn, hc_ffn;
  Compressor compressor, index_compressor;
  WeightMatrix index_q_b, index_proj;
  MoeWeights moe;
  std::vector<int32_t> token_experts;  // hash layers: [n_vocab, n_expert_used], host
};

Status load_hyper_connection(TensorLoader& loader, const std::string& prefix, int64_t n_mix, int64_t n_scale, int64_t width,
                             HyperConnection* hc) {
  DS_RETURN_IF_ERROR(loader.matrix(prefix + "_fn.weight", n_mix, width, &hc->fn));
  DS_RETURN_IF_ERROR(loader.vector(prefix + "_base.weight", n_mix, &hc->base));
  return loader.vector(prefix + "_scale.weight", n_scale, &hc->scale);
}

Status load_compressor(TensorLoader& loader, const std::string& prefix, int64_t ratio, int64_t dim, int64_t n_embd, Compressor* w) {
  const int64_t width = ratio == k_csa_ratio ? 2 * dim : dim;
  DS_RETURN_IF_ERROR(loader.matrix(prefix + "_kv.weight", width, n_embd, &w->kv));
  DS_RETURN_IF_ERROR(loader.matrix(prefix + "_gate.weight", width, n_embd, &w->gate));
  DS_RETURN_IF_ERROR(loader.table(prefix + "_ape.weight", ratio, width, &w->ape));
  return loader.vector(prefix + "_norm.weight", dim, &w->norm);
}

class Deepseek4Layers : public LayerStack {
 public:
  Deepseek4Layers(const ModelConfig& c, Backend& backend) : config_(c), backend_(backend), layers_(size_t(c.n_layer)) {}

  Status load(TensorLoader& loader) override {
    const ModelConfig& c = config_;
    const Deepseek4Config& v = c.v4;
    const int64_t d = c.n_embd, hd = c.head_dim, hc_width = v.hc_streams * d, n_mix = v.hc_streams * (2 + v.hc_streams);
    DS_RETURN_IF_ERROR(load_hyper_connection(loader, "output_hc", v.hc_streams, 1, hc_width, &head_));
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string b = c.block_prefix(i);
      Layer& w = layers_[size_t(i)];
      DS_RETURN_IF_ERROR(loader.vector(b + "attn_norm.weight", d, &w.attn_norm));
      DS_RETURN_IF_ERROR(loader.vector(b + "ffn_norm.weight", d, &w.ffn_norm));
      // Under tensor parallel a rank keeps its heads (queries, sinks) and their output groups; the
      // one KV row, the compressors and the indexer serve every head and are whole on every rank.
      DS_RETURN_IF_ERROR(loader.vector(b + "attn_sinks.weight", c.n_head, &w.sinks, false, Split::rows));
      DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q_a.weight", v.q_lora_rank, d, &w.q_a));
      DS_RETURN_IF_ERROR(loader.vector(b + "attn_q_a_norm.weight", v.q_lora_rank, &w.q_a_norm));
      DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q_b.weight", c.n_head * hd, v.q_lora_rank, &w.q_b, true, Split::rows));
      DS_RETURN_IF_ERROR(loader.matrix(b + "attn_kv.weight", hd, d, &w.kv));
      DS_RETURN_IF_ERROR(loader.vector(b + "attn_kv_a_norm.weight", hd, &w.kv_norm));
      const int64_t group_in = c.n_head * hd / v.o_groups;
      const int64_t first_group = int64_t(c.ranks.rank) * v.o_groups;  // this rank's groups in the file's
      auto out_a = loader.stacked(b + "attn_output_a.weight", 1, v.o_groups * c.ranks.ranks * v.o_lora_rank, group_in);
      if (!out_a.ok()) return out_a.status();
      w.out_a.resize(size_t(v.o_groups));
      for (int64_t g = 0; g < v.o_groups; ++g) {
        DS_RETURN_IF_ERROR(loader.rows(out_a.value(), (first_group + g) * v.o_lora_rank, v.o_lora_rank, &w.out_a[size_t(g)]));
      }
      DS_RETURN_IF_ERROR(loader.matrix(b + "attn_output_b.weight", d, v.o_groups * v.o_lora_rank, &w.out_b, true, Split::columns));
      DS_RETURN_IF_ERROR(load_hyper_connection(loader, b + "hc_attn", n_mix, 3, hc_width, &w.hc_attn));
      DS_RETURN_IF_ERROR(load_hyper_connection(loader, b + "hc_ffn", n_mix, 3, hc_width, &w.hc_ffn));
      const int64_t ratio = v.compress_ratios[size_t(i)];
      if (ratio > 0) DS_RETURN_IF_ERROR(load_compressor(loader, b + "attn_compressor", ratio, hd, d, &w.compressor));
      if (ratio == k_csa_ratio) {
        const IndexerConfig& x = c.indexer;
        DS_RETURN_IF_ERROR(load_compressor(loader, b + "indexer_compressor", ratio, x.key_dim, d, &w.index_compressor));
        DS_RETURN_IF_ERROR(loader.matrix(b + "indexer.attn_q_b.weight", x.n_head * x.key_dim, v.q_lora_rank, &w.index_q_b));
        DS_RETURN_IF_ERROR(loader.matrix(b + "indexer.proj.weight", x.n_head, d, &w.index_proj));
      }
      DS_RETURN_IF_ERROR(load_experts(loader, b, i, w));
    }
    return Status();
  }

  Status reserve(int64_t n) override {
    const ModelConfig& c = config_;
    const Deepseek4Config& v = c.v4;
    const IndexerConfig& x = c.indexer;
    Backend& b = backend_;
    const int64_t hc = v.hc_streams, d = c.n_embd, hd = c.head_dim;
    for (DeviceArray* a : {&streams_, &streams_normed_}) DS_RETURN_IF_ERROR(a->reserve(b, n * hc * d));
    DS_RETURN_IF_ERROR(mix_logits_.reserve(b, n * hc * (2 + hc)));
    DS_RETURN_IF_ERROR(post_.reserve(b, n * hc));
    DS_RETURN_IF_ERROR(mix_.reserve(b, n * hc * hc));
    DS_RETURN_IF_ERROR(query_latent_.reserve(b, n * v.q_lora_rank));
    for (DeviceArray* a : {&q_, &o_}) DS_RETURN_IF_ERROR(a->reserve(b, n * c.n_head * hd));
    DS_RETURN_IF_ERROR(kv_.reserve(b, n * hd));
    for (DeviceArray* a : {&compressed_kv_, &compressed_score_}) DS_RETURN_IF_ERROR(a->reserve(b, n * std::max(2 * hd, 2 * x.key_dim)));
    DS_RETURN_IF_ERROR(index_q_.reserve(b, n * x.n_head * x.key_dim));
    DS_RETURN_IF_ERROR(index_weights_.reserve(b, n * x.n_head));
    DS_RETURN_IF_ERROR(selected_.reserve(b, n * x.top_k));
    DS_RETURN_IF_ERROR(n_selected_.reserve(b, n));
    DS_RETURN_IF_ERROR(z_.reserve(b, n * v.o_groups * v.o_lora_rank));
    for (DeviceArrayOf<int32_t>* a : {&inverse_positions_, &index_positions_}) DS_RETURN_IF_ERROR(a->reserve(b, n));
    DS_RETURN_IF_ERROR(forced_experts_.reserve(b, n * c.moe.n_expert_used));
    DS_RETURN_IF_ERROR(moe_.reserve(b, c, n));
    return shared_ffn_.reserve(b, n, c.moe.shared_ff);
  }

  void begin_step(const Batch& batch) override {
    const int64_t n = batch.n_tokens();
    tokens_ = batch.tokens;
    std::vector<int32_t> inverse(static_cast<size_t>(n)), visible_rows(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      inverse[size_t(t)] = -batch.positions[size_t(t)];
      visible_rows[size_t(t)] = (batch.positions[size_t(t)] + 1) / int32_t(k_csa_ratio) - 1;  // the last visible row, -1: none
    }
    backend_.upload(inverse_positions_.data(), inverse.data(), inverse.size() * sizeof(int32_t));
    backend_.upload(index_positions_.data(), visible_rows.data(), visible_rows.size() * sizeof(int32_t));
    moe_.begin_step(config_);
  }

  void run_layer(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) override {
    const ModelConfig& c = config_;
    const int64_t n = step.n_tokens, hc = c.v4.hc_streams, d = c.n_embd;
    Backend& b = ctx.backend;
    const Layer& w = layers_[size_t(layer)];
    if (layer == 0) {  // every stream starts as the embedding
      TraceScope scope(ctx.trace, "copy_heads");
      b.copy_heads(HeadRows{streams_.data(), hc, d, hc * d, d}, HeadRows{ctx.x, hc, d, d, 0}, n);
    }
    sublayer(ctx, w.hc_attn, w.attn_norm, n, [&] { attention(layer, ctx, step, cache); });
    sublayer(ctx, w.hc_ffn, w.ffn_norm, n, [&] { ffn(layer, ctx, n); });
    if (layer == c.n_layer - 1) {  // the head's reduction of the streams, into the residual the model normalises
      TraceScope scope(ctx.trace, "hyper_connection");
      mix_logits(ctx, head_, n);
      b.hyper_connection_head(hc_params(head_), streams_.data(), mix_logits_.data(), n, ctx.x);
    }
  }

  const char* layer_kind(int64_t layer) const override {
    const int64_t ratio = config_.v4.compress_ratios[size_t(layer)];
    return ratio == 0 ? "window" : ratio == k_csa_ratio ? "csa" : "hca";
  }
  const std::vector<int64_t>& expert_tokens() const override { return moe_.expert_tokens(); }

 private:
  Status load_experts(TensorLoader& loader, const std::string& b, int64_t layer, Layer& w) {
    const ModelConfig& c = config_;
    const MoeConfig& moe = c.moe;
    // A hash-routed layer chooses by token id and has no selection bias; the others have one.
    const bool hashed = layer < c.v4.hash_layers;
    if (hashed) {
      DS_RETURN_IF_ERROR(loader.integers(b + "ffn_gate_tid2eid.weight", c.n_vocab, moe.n_expert_used, moe.n_expert, &w.token_experts));
      if (loader.find(b + "exp_probs_b.bias")) return Status::error("model: tensor '" + b + "exp_probs_b.bias' in a hash-routed layer");
    } else {
      if (!loader.find(b + "exp_probs_b.bias")) return Status::error("model: tensor '" + b + "exp_probs_b.bias' is missing");
      if (loader.find(b + "ffn_gate_tid2eid.weight")) {
        return Status::error("model: tensor '" + b + "ffn_gate_tid2eid.weight' in a layer past hash_layer_count");
      }
    }
    return load_moe(loader, c, b, &w.moe);
  }

  HyperConnectionParams hc_params(const HyperConnection& w) const {
    const Deepseek4Config& v = config_.v4;
    return HyperConnectionParams{v.hc_streams, config_.n_embd, w.scale.data, w.base.data, v.sinkhorn_iterations, v.hc_eps};
  }

  // mix_logits_ = fn · rms_norm(the streams side by side).
  void mix_logits(const ForwardContext& ctx, const HyperConnection& w, int64_t n) {
    const int64_t width = config_.v4.hc_streams * config_.n_embd;
    ctx.backend.rms_norm(streams_.data(), width, nullptr, config_.norm_eps, n, width, streams_normed_.data(), width);
    ctx.matmul(w.fn, streams_normed_.data(), n, mix_logits_.data());
  }

  // One sublayer between the streams: its input (the streams' pre-weighted
  // sum, normalised) into ctx.h, `block` writing ctx.out, mixed back in.
  template <typename Block>
  void sublayer(const ForwardContext& ctx, const HyperConnection& w, const WeightVector& norm, int64_t n, Block&& block) {
    Backend& b = ctx.backend;
    {
      TraceScope scope(ctx.trace, "hyper_connection");
      mix_logits(ctx, w, n);
      b.hyper_connection_pre(hc_params(w), streams_.data(), mix_logits_.data(), n, ctx.x, post_.data(), mix_.data());
    }
    ctx.rms_norm(ctx.x, norm, n, config_.n_embd, config_.n_embd, ctx.h);
    block();
    ctx.sum_across_ranks(ctx.out, n);  // under tensor parallel each rank's heads' or experts' part
    TraceScope scope(ctx.trace, "hyper_connection");
    b.hyper_connection_post(hc_params(w), streams_.data(), ctx.out, post_.data(), mix_.data(), n);
  }

  void compress(const ForwardContext& ctx, const StepIndex& step, const Compressor& w, int64_t ratio, int64_t dim, const KvLayerView& state,
                const KvLayerView& rows, int64_t page_tokens) {
    TraceScope scope(ctx.trace, "kv_compress");
    const int64_t n = step.n_tokens;
    ctx.matmul(w.kv, ctx.h, n, compressed_kv_.data());
    ctx.matmul(w.gate, ctx.h, n, compressed_score_.data());
    const KvCompressorParams params{ratio, dim, ratio == k_csa_ratio, w.ape.data, w.norm.data, config_.norm_eps, config_.v4.compressed_rope};
    ctx.backend.kv_compress(params, step, page_tokens, compressed_kv_.data(), compressed_score_.data(), state, rows);
  }

  // The lightning indexer's choice of compressed rows for each token, into selected_.
  void select(const ForwardContext& ctx, const StepIndex& step, const Layer& w, const KvLayerView& index_rows) {
    const IndexerConfig& x = config_.indexer;
    const int64_t n = step.n_tokens, n_rot = config_.rope.n_rot;
    Backend& b = ctx.backend;
    TraceScope scope(ctx.trace, "indexer");
    ctx.matmul(w.index_q_b, query_latent_.data(), n, index_q_.data());
    b.rope_rows(config_.v4.compressed_rope, step.positions, step.n_ctx,
                HeadRows{index_q_.data() + x.key_dim - n_rot, x.n_head, n_rot, x.n_head * x.key_dim, x.key_dim}, n);
    ctx.matmul(w.index_proj, ctx.h, n, index_weights_.data());
    // Over the rows: token t sees rows [0, (p + 1) / 4), as if at position (p + 1) / 4 - 1 of a row stream.
    StepIndex rows_step = step;
    rows_step.positions = index_positions_.data();
    b.indexer_select(index_rows, rows_step, index_q_.data(), x.n_head, index_weights_.data(), 1.0f / std::sqrt(float(x.key_dim * x.n_head)),
                     x.top_k, selected_.data(), n_selected_.data());
  }

  void attention(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) {
    const ModelConfig& c = config_;
    const Deepseek4Config& v = c.v4;
    const Layer& w = layers_[size_t(layer)];
    const int64_t n = step.n_tokens, hd = c.head_dim, n_rot = c.rope.n_rot, ratio = v.compress_ratios[size_t(layer)];
    const int64_t page_tokens = cache.page_tokens();
    Backend& b = ctx.backend;
    const RopeParams& rope = ratio > 0 ? v.compressed_rope : c.rope;
    ctx.matmul(w.q_a, ctx.h, n, query_latent_.data());
    ctx.rms_norm(query_latent_.data(), w.q_a_norm, n, v.q_lora_rank, v.q_lora_rank, query_latent_.data());
    ctx.matmul(w.q_b, query_latent_.data(), n, q_.data());
    {
      TraceScope scope(ctx.trace, "rms_norm");
      b.rms_norm(q_.data(), hd, nullptr, c.norm_eps, n * c.n_head, hd, q_.data(), hd);
    }
    ctx.matmul(w.kv, ctx.h, n, kv_.data());
    ctx.rms_norm(kv_.data(), w.kv_norm, n, hd, hd, kv_.data());
    const KvLayerView window = cache.stream(layer, k_window);
    {
      TraceScope scope(ctx.trace, "rope_kv_write");
      b.rope_kv_write(rope, step.windowed(), HeadRows{q_.data() + hd - n_rot, c.n_head, n_rot, c.n_head * hd, hd},
                      HeadRows{kv_.data() + hd - n_rot, 1, n_rot, hd, hd}, window, kv_.data(), nullptr);
    }
    KvLayerView rows{};
    if (ratio > 0) {
      rows = cache.stream(layer, k_rows);
      compress(ctx, step, w.compressor, ratio, hd, cache.stream(layer, k_state), rows, page_tokens);
    }
    const bool indexed = ratio == k_csa_ratio;
    if (indexed) {
      const KvLayerView index_rows = cache.stream(layer, k_index_rows);
      compress(ctx, step, w.index_compressor, ratio, c.indexer.key_dim, cache.stream(layer, k_index_state), index_rows, page_tokens);
      select(ctx, step, w, index_rows);
    }
    {
      TraceScope scope(ctx.trace, "compressed_attention");
      const CompressedAttentionParams params{c.n_head, hd, v.window, ratio, c.indexer.top_k, 1.0f / std::sqrt(float(hd)), w.sinks.data};
      b.compressed_attention(params, step, page_tokens, q_.data(), window, rows, indexed ? selected_.data() : nullptr,
                             indexed ? n_selected_.data() : nullptr, o_.data());
      b.rope_rows(rope, inverse_positions_.data(), step.n_ctx, HeadRows{o_.data() + hd - n_rot, c.n_head, n_rot, c.n_head * hd, hd}, n);
    }
    {
      TraceScope scope(ctx.trace, "matmul_batched");
      const int64_t group_in = c.n_head * hd / v.o_groups;
      b.matmul_batched(w.out_a.data(), v.o_groups, o_.data(), c.n_head * hd, group_in, n, z_.data(), v.o_groups * v.o_lora_rank,
                       v.o_lora_rank);
    }
    ctx.matmul(w.out_b, z_.data(), n, ctx.out);
  }

  void ffn(int64_t layer, const ForwardContext& ctx, int64_t n) {
    const ModelConfig& c = config_;
    const Layer& w = layers_[size_t(layer)];
    ExpertRouting routing = c.moe;
    routing.swiglu_limit = c.v4.expert_limit[size_t(layer)];
    if (!w.token_experts.empty()) {
      const int64_t k = routing.n_expert_used;
      std::vector<int32_t> chosen(size_t(n * k));
      for (int64_t t = 0; t < n; ++t) std::copy_n(w.token_experts.data() + tokens_[size_t(t)] * k, k, chosen.data() + t * k);
      ctx.backend.upload(forced_experts_.data(), chosen.data(), chosen.size() * sizeof(int32_t));
      routing.forced_experts = forced_experts_.data();
    }
    moe_.run(ctx, w.moe, n, shared_ffn_, routing, c.v4.shared_limit[size_t(layer)]);
  }

  const ModelConfig& config_;
  Backend& backend_;
  std::vector<Layer> layers_;
  HyperConnection head_;
  std::vector<int32_t> tokens_;  // the step's, for hash routing
  DeviceArray streams_, streams_normed_;  // [n, hc, n_embd]
  DeviceArray mix_logits_, post_, mix_;   // [n, hc (2 + hc)], [n, hc], [n, hc, hc]
  DeviceArray query_latent_, q_, kv_, o_, z_;
  DeviceArray compressed_kv_, compressed_score_;  // [n, width] of the compressor running
  DeviceArray index_q_, index_weights_;
  DeviceArrayOf<int32_t> selected_, n_selected_;
  DeviceArrayOf<int32_t> inverse_positions_, index_positions_;
  DeviceArrayOf<int32_t> forced_experts_;
  MoeFfn moe_;
  GatedFfn shared_ffn_;
};

Result<std::unique_ptr<LayerStack>> make_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend) {
  DS_RETURN_IF_ERROR(refuse_mla_prefill(options));
  return std::unique_ptr<LayerStack>(new Deepseek4Layers(c, backend));
}

std::vector<BackendOp> layer_ops(const ModelConfig& c) {
  std::vector<BackendOp> ops = {BackendOp::hyper_connection, BackendOp::rope_kv_write, BackendOp::rope_rows, BackendOp::compressed_attention,
                                BackendOp::matmul_batched, BackendOp::moe_experts, BackendOp::swiglu, BackendOp::silu_mul, BackendOp::add, BackendOp::copy_heads};
  const auto& ratios = c.v4.compress_ratios;
  if (std::any_of(ratios.begin(), ratios.end(), [](int64_t r) { return r > 0; })) ops.push_back(BackendOp::kv_compress);
  if (std::find(ratios.begin(), ratios.end(), k_csa_ratio) != ratios.end()) ops.push_back(BackendOp::indexer_select);
  return ops;
}


// Tensor parallel: each rank its heads, in whole output groups, and the
// experts as DeepSeek-V3's are split (model/families/deepseek2.cpp); the
// hyper-connections, the KV row, the compressors and the indexer are whole
// on every rank, so each sublayer's output is one all-reduce of partial sums.
Status split_config(ModelConfig& c) {
  const int ranks = c.ranks.ranks;
  const std::string p = c.arch_name() + std::string(".");
  std::vector<std::pair<std::string, int64_t*>> widths = {{p + "attention.head_count", &c.n_head},
                                                          {p + "attention.output_group_count", &c.v4.o_groups},
                                                          {p + "expert_shared_count x expert_feed_forward_length", &c.moe.shared_ff}};
  if (!c.ranks.experts_whole) widths.push_back({p + "expert_feed_forward_length", &c.moe.expert_ff});
  for (const auto& [key, value] : widths) {
    if (*value % ranks != 0) {
      return Status::error("tensor parallel: " + key + " " + std::to_string(*value) + " must divide by " + std::to_string(ranks) + " ranks");
    }
  }
  for (const auto& [key, value] : widths) *value /= ranks;
  return Status();
}

}  // namespace

const Family& deepseek4_family() {
  static const Family family{"deepseek4", RopeLayout::normal, read_config, make_layers, layer_ops, split_config};
  return family;
}

}  // namespace ds
