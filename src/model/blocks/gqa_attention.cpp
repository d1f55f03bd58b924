#include "model/blocks/gqa_attention.h"

#include <cmath>

namespace ds {

Status read_gqa_config(const ConfigReader& r, ModelConfig& c) {
  if (r.has("attention.key_length")) {
    DS_RETURN_IF_ERROR(r.dim("attention.key_length", &c.head_dim));
  } else if (c.n_embd % c.n_head != 0) {
    return Status::error("model: " + r.prefix() + "embedding_length " + std::to_string(c.n_embd) + " is not a multiple of " +
                         r.prefix() + "attention.head_count " + std::to_string(c.n_head) + " (and no attention.key_length is given)");
  } else {
    c.head_dim = c.n_embd / c.n_head;
  }
  if (r.has("attention.value_length")) {
    int64_t value_length = 0;
    DS_RETURN_IF_ERROR(r.dim("attention.value_length", &value_length));
    if (value_length != c.head_dim) {
      return Status::error("model: key_length and value_length differ, which this architecture does not support");
    }
  }
  c.kv = KvRowShape{c.kv_dim(), c.kv_dim(), c.n_head_kv, false, {}};
  return Status();
}

Status split_gqa_heads(ModelConfig& c) {
  const int ranks = c.ranks.ranks;
  if (c.n_head % ranks != 0 || c.n_head_kv % ranks != 0) {
    return Status::error("tensor parallel: " + std::string(c.arch_name()) + ".attention.head_count " + std::to_string(c.n_head) +
                         " and head_count_kv " + std::to_string(c.n_head_kv) + " must both divide by " + std::to_string(ranks) + " ranks");
  }
  c.n_head /= ranks;
  c.n_head_kv /= ranks;
  c.kv = KvRowShape{c.kv_dim(), c.kv_dim(), c.n_head_kv, false, {}};
  return Status();
}

Status load_gqa(TensorLoader& loader, const ModelConfig& c, const std::string& b, bool biases_required, GqaWeights* w) {
  DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q.weight", c.q_dim(), c.n_embd, &w->wq, true, Split::rows));
  DS_RETURN_IF_ERROR(loader.matrix(b + "attn_k.weight", c.kv_dim(), c.n_embd, &w->wk, true, Split::rows));
  DS_RETURN_IF_ERROR(loader.matrix(b + "attn_v.weight", c.kv_dim(), c.n_embd, &w->wv, true, Split::rows));
  DS_RETURN_IF_ERROR(loader.matrix(b + "attn_output.weight", c.n_embd, c.q_dim(), &w->wo, true, Split::columns));
  DS_RETURN_IF_ERROR(loader.vector(b + "attn_q.bias", c.q_dim(), &w->bq, !biases_required, Split::rows));
  DS_RETURN_IF_ERROR(loader.vector(b + "attn_k.bias", c.kv_dim(), &w->bk, !biases_required, Split::rows));
  return loader.vector(b + "attn_v.bias", c.kv_dim(), &w->bv, !biases_required, Split::rows);
}

Status load_rope_freqs(TensorLoader& loader, const ModelConfig& c, WeightVector* out) {
  return loader.vector("rope_freqs.weight", c.rope.n_rot / 2, out, /*optional=*/true);
}

Status GqaAttention::reserve(Backend& backend, const ModelConfig& c, int64_t n) {
  DS_RETURN_IF_ERROR(q_.reserve(backend, n * c.q_dim()));
  DS_RETURN_IF_ERROR(attn_.reserve(backend, n * c.q_dim()));
  DS_RETURN_IF_ERROR(k_.reserve(backend, n * c.kv_dim()));
  return v_.reserve(backend, n * c.kv_dim());
}

void GqaAttention::run(const ForwardContext& ctx, const GqaWeights& w, const WeightVector& rope_freqs, const StepIndex& step,
                       const KvLayerView& kv) {
  const ModelConfig& c = ctx.config;
  Backend& b = ctx.backend;
  const int64_t n = step.n_tokens;
  ctx.matmul(w.wq, ctx.h, n, q_.data());
  ctx.matmul(w.wk, ctx.h, n, k_.data());
  ctx.matmul(w.wv, ctx.h, n, v_.data());
  if (!w.bq.empty() || !w.bk.empty() || !w.bv.empty()) {
    TraceScope scope(ctx.trace, "bias");
    if (!w.bq.empty()) b.add_bias(q_.data(), w.bq.data, n, c.q_dim());
    if (!w.bk.empty()) b.add_bias(k_.data(), w.bk.data, n, c.kv_dim());
    if (!w.bv.empty()) b.add_bias(v_.data(), w.bv.data, n, c.kv_dim());
  }
  {
    TraceScope scope(ctx.trace, "rope_kv_write");
    const HeadRows q{q_.data(), c.n_head, c.head_dim, c.q_dim(), c.head_dim};
    const HeadRows k{k_.data(), c.n_head_kv, c.head_dim, c.kv_dim(), c.head_dim};
    RopeParams rope = c.rope;
    rope.freq_factors = rope_freqs.empty() ? nullptr : rope_freqs.data;
    b.rope_kv_write(rope, step, q, k, kv, k_.data(), v_.data());
  }
  {
    TraceScope scope(ctx.trace, "attention");
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
    b.paged_attention(kv, shape, step, q_.data(), attn_.data());
  }
  ctx.matmul(w.wo, attn_.data(), n, ctx.out);
}

}  // namespace ds
