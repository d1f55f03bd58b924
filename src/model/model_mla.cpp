// Multi-head latent attention (DeepSeek-V2/V3) in absorbed form.
//
// Each token caches one row: its normalised KV latent (kv_lora_rank) and its
// RoPE key (qk_rope_dim, shared by all heads). Per head, the key's no-RoPE
// part is k_b·latent, so q_nope·k = (k_bᵀ·q_nope)·latent: the query is mapped
// into latent space once per head, attention runs as multi-query attention
// over the cached rows (values are the latents themselves), and v_b maps each
// head's attended latent back to v_head_dim. The cache is never expanded.

#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "model/model.h"

namespace ds {

void Model::mla_attention_block(int64_t layer, const Batch& batch, KvCache& cache) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla_config;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  const int64_t n = batch.n_tokens();
  const int64_t q_head = m.qk_nope_dim + m.qk_rope_dim, row = m.cache_dim();
  rms_norm_rows(x_.data(), w.attn_norm, n, c.n_embd, c.n_embd, h_.data());

  // Queries, through the low-rank pair when the model has one.
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

  int64_t n_ctx = 0;
  for (int32_t p : batch.positions) n_ctx = std::max<int64_t>(n_ctx, p + 1);
  const KvLayerView kv = cache.layer(layer);
  {
    TraceScope scope(trace_, "rope_kv_write");
    pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int32_t* position = batch.positions.data() + t;
        rope(c.rope, latent_.data() + t * row + m.kv_lora_rank, 1, 1, m.qk_rope_dim, position, n_ctx);
        for (int64_t h = 0; h < c.n_head; ++h) {
          std::memcpy(q_pe_.data() + (t * c.n_head + h) * m.qk_rope_dim, q_.data() + (t * c.n_head + h) * q_head + m.qk_nope_dim,
                      size_t(m.qk_rope_dim) * sizeof(float));
        }
        rope(c.rope, q_pe_.data() + t * c.n_head * m.qk_rope_dim, 1, c.n_head, m.qk_rope_dim, position, n_ctx);
      }
    });
    kv_write(kv, latent_.data(), nullptr, n, batch.positions.data(), batch.seq_of_token.data(), batch.block_tables.data());
  }

  // Absorbed queries [n, n_head, latent | rope], the layout of a cache row.
  {
    TraceScope scope(trace_, "mla_absorb_queries", dtype_name(w.k_b[0].type));
    for (int64_t h = 0; h < c.n_head; ++h) {
      for (int64_t t = 0; t < n; ++t) {
        std::memcpy(head_in_.data() + t * m.qk_nope_dim, q_.data() + (t * c.n_head + h) * q_head, size_t(m.qk_nope_dim) * sizeof(float));
      }
      matmul(pool_, w.k_b[size_t(h)], head_in_.data(), n, head_out_.data(), matmul_scratch_);
      for (int64_t t = 0; t < n; ++t) {
        float* q = q_full_.data() + (t * c.n_head + h) * row;
        std::memcpy(q, head_out_.data() + t * m.kv_lora_rank, size_t(m.kv_lora_rank) * sizeof(float));
        std::memcpy(q + m.kv_lora_rank, q_pe_.data() + (t * c.n_head + h) * m.qk_rope_dim, size_t(m.qk_rope_dim) * sizeof(float));
      }
    }
  }
  {
    TraceScope scope(trace_, "attention", "mla");
    const AttentionShape shape{c.n_head, 1, row, m.kq_scale, m.kv_lora_rank};
    paged_attention(pool_, kv, shape, q_full_.data(), n, batch.positions.data(), batch.seq_of_token.data(),
                    batch.block_tables.data(), attn_latent_.data(), attention_scratch_);
  }

  // Each head's attended latent back to values, then the output projection.
  {
    TraceScope scope(trace_, "mla_latent_to_values", dtype_name(w.v_b[0].type));
    for (int64_t h = 0; h < c.n_head; ++h) {
      for (int64_t t = 0; t < n; ++t) {
        std::memcpy(head_in_.data() + t * m.kv_lora_rank, attn_latent_.data() + (t * c.n_head + h) * m.kv_lora_rank,
                    size_t(m.kv_lora_rank) * sizeof(float));
      }
      matmul(pool_, w.v_b[size_t(h)], head_in_.data(), n, head_out_.data(), matmul_scratch_);
      for (int64_t t = 0; t < n; ++t) {
        std::memcpy(attn_.data() + (t * c.n_head + h) * m.v_head_dim, head_out_.data() + t * m.v_head_dim,
                    size_t(m.v_head_dim) * sizeof(float));
      }
    }
  }
  traced_matmul(w.wo, attn_.data(), n, proj_.data());
  residual_add(proj_.data(), n);
}

}  // namespace ds
