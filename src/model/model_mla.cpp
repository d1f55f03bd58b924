// Multi-head latent attention (DeepSeek-V2/V3) in absorbed form.
//
// Each token caches one row: its normalised KV latent (kv_lora_rank) and its
// RoPE key (qk_rope_dim, shared by all heads). Per head, the key's no-RoPE
// part is k_b·latent, so q_nope·k = (k_bᵀ·q_nope)·latent: the query is mapped
// into latent space once per head, attention runs as multi-query attention
// over the cached rows (values are the latents themselves), and v_b maps each
// head's attended latent back to v_head_dim. The cache is never expanded.
// The per-head maps are one batched matmul each, reading the heads' rows in
// place through strides.

#include "model/model.h"

namespace ds {

void Model::mla_attention_block(int64_t layer, const StepIndex& step, KvCache& cache) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla_config;
  Backend& b = *backend_;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  const int64_t n = step.n_tokens;
  const int64_t q_head = m.qk_nope_dim + m.qk_rope_dim, row = m.cache_dim(), q_row = c.n_head * q_head;
  rms_norm_rows(x_.data(), w.attn_norm, n, c.n_embd, c.n_embd, h_.data());

  // Queries [n, n_head, nope | rope], through the low-rank pair when the model has one.
  if (m.q_lora_rank > 0) {
    traced_matmul(w.wq_a, h_.data(), n, q_a_.data());
    rms_norm_rows(q_a_.data(), w.q_a_norm, n, m.q_lora_rank, m.q_lora_rank, q_a_.data());
    traced_matmul(w.wq_b, q_a_.data(), n, q_.data());
  } else {
    traced_matmul(w.wq, h_.data(), n, q_.data());
  }
  // The cache rows: latent (normalised) then the RoPE key.
  traced_matmul(w.wkv_a, h_.data(), n, latent_.data());
  rms_norm_rows(latent_.data(), w.kv_a_norm, n, m.kv_lora_rank, row, latent_.data());

  const KvLayerView kv = cache.layer(layer);
  const HeadRows q_pe{q_.data() + m.qk_nope_dim, c.n_head, m.qk_rope_dim, q_row, q_head};
  {
    TraceScope scope(trace_, "rope_kv_write");
    const HeadRows k_pe{latent_.data() + m.kv_lora_rank, 1, m.qk_rope_dim, row, m.qk_rope_dim};
    b.rope_kv_write(c.rope, step, q_pe, k_pe, kv, latent_.data(), nullptr);
  }

  // Absorbed queries [n, n_head, latent | rope], the layout of a cache row.
  {
    TraceScope scope(trace_, "mla_absorb_queries", dtype_name(w.k_b[0].type));
    b.matmul_batched(w.k_b.data(), c.n_head, q_.data(), q_row, q_head, n, q_full_.data(), c.n_head * row, row);
    b.copy_heads(HeadRows{q_full_.data() + m.kv_lora_rank, c.n_head, m.qk_rope_dim, c.n_head * row, row}, q_pe, n);
  }
  {
    TraceScope scope(trace_, "attention", "mla");
    const AttentionShape shape{c.n_head, 1, row, m.kq_scale, m.kv_lora_rank};
    b.paged_attention(kv, shape, step, q_full_.data(), attn_latent_.data());
  }

  // Each head's attended latent back to values, then the output projection.
  {
    TraceScope scope(trace_, "mla_latent_to_values", dtype_name(w.v_b[0].type));
    b.matmul_batched(w.v_b.data(), c.n_head, attn_latent_.data(), c.n_head * m.kv_lora_rank, m.kv_lora_rank, n, attn_.data(),
                     c.n_head * m.v_head_dim, m.v_head_dim);
  }
  traced_matmul(w.wo, attn_.data(), n, proj_.data());
  residual_add(proj_.data(), n);
}

}  // namespace ds
