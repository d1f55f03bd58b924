// Multi-head latent attention (DeepSeek-V2/V3).
//
// Each token caches one row: its normalised KV latent (kv_lora_rank) and its
// RoPE key (qk_rope_dim, shared by all heads). Per head, the key's no-RoPE
// part is k_b·latent, so q_nope·k = (k_bᵀ·q_nope)·latent: in the absorbed
// form the query is mapped into latent space once per head, attention runs as
// multi-query attention over the cached rows (values are the latents
// themselves), and v_b maps each head's attended latent back to v_head_dim.
// The per-head maps are one batched matmul each, reading the heads' rows in
// place through strides.
//
// A query then costs (kv_lora + rope) + kv_lora multiply-adds per position
// and head. In the expanded form (Backend::mla_expanded_attention) the cached
// latents are up-projected per block of positions to keys (nope + rope wide)
// and values (v_head wide) once for a whole chunk, and a query costs
// nope + rope + v_head per position and head: for a long chunk of prompt the
// up-projection is paid back many times (ik_llama.cpp's "mla=3"; about 3.4x
// fewer multiply-adds in attention at DeepSeek's widths). Decode stays
// absorbed: one query per sequence would pay the up-projection of its whole
// context. The cache is the same for both forms.
//
// The choice is per run of one sequence's tokens, never per step: a token's
// result does not depend on other sequences sharing its step. It does depend
// on its own run's form (the two round differently), so a prompt chunked
// differently can differ in the last bits.

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
  {
    TraceScope scope(trace_, "rope_kv_write");
    const HeadRows q_pe{q_.data() + m.qk_nope_dim, c.n_head, m.qk_rope_dim, q_row, q_head};
    const HeadRows k_pe{latent_.data() + m.kv_lora_rank, 1, m.qk_rope_dim, row, m.qk_rope_dim};
    b.rope_kv_write(c.rope, step, q_pe, k_pe, kv, latent_.data(), nullptr);
  }

  const AttentionShape expanded{c.n_head, c.n_head, q_head, m.kq_scale, m.v_head_dim};
  for (const MlaRun& run : mla_runs_) {
    if (!run.expanded) {
      mla_absorbed_attention(w, kv, step, run.t0, run.n);
      continue;
    }
    TraceScope scope(trace_, "attention", "mla_expanded");
    b.mla_expanded_attention(kv, expanded, step, run.t0, run.n, q_.data(), q_row, w.k_up.data(), w.v_b.data(), attn_.data(),
                             c.n_head * m.v_head_dim);
  }
  traced_matmul(w.wo, attn_.data(), n, proj_.data());
  residual_add(proj_.data(), n);
}

void Model::mla_absorbed_attention(const LayerWeights& w, const KvLayerView& kv, const StepIndex& step, int64_t t0, int64_t n) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla_config;
  Backend& b = *backend_;
  const int64_t q_head = m.qk_nope_dim + m.qk_rope_dim, row = m.cache_dim(), q_row = c.n_head * q_head;
  float* q = q_.data() + t0 * q_row;
  float* q_full = q_full_.data() + t0 * c.n_head * row;
  float* attn_latent = attn_latent_.data() + t0 * c.n_head * m.kv_lora_rank;
  // Absorbed queries [n, n_head, latent | rope], the layout of a cache row.
  {
    TraceScope scope(trace_, "mla_absorb_queries", dtype_name(w.k_b[0].type));
    b.matmul_batched(w.k_b.data(), c.n_head, q, q_row, q_head, n, q_full, c.n_head * row, row);
    b.copy_heads(HeadRows{q_full + m.kv_lora_rank, c.n_head, m.qk_rope_dim, c.n_head * row, row},
                 HeadRows{q + m.qk_nope_dim, c.n_head, m.qk_rope_dim, q_row, q_head}, n);
  }
  {
    TraceScope scope(trace_, "attention", "mla");
    StepIndex run = step;
    run.n_tokens = n;
    run.tokens += t0, run.positions += t0, run.seq_of_token += t0;
    b.paged_attention(kv, AttentionShape{c.n_head, 1, row, m.kq_scale, m.kv_lora_rank}, run, q_full, attn_latent);
  }
  // Each head's attended latent back to values.
  {
    TraceScope scope(trace_, "mla_latent_to_values", dtype_name(w.v_b[0].type));
    b.matmul_batched(w.v_b.data(), c.n_head, attn_latent, c.n_head * m.kv_lora_rank, m.kv_lora_rank, n,
                     attn_.data() + t0 * c.n_head * m.v_head_dim, c.n_head * m.v_head_dim, m.v_head_dim);
  }
}

namespace {

// Below this many tokens a run stays absorbed even where the count says the
// expanded form is cheaper (a first short prompt): the absorbed form is what
// decode and speculative verification take, so short prompts compute as they do.
constexpr int64_t k_min_expanded_run = 64;

}  // namespace

void Model::plan_mla_runs(const Batch& batch) {
  const MlaConfig& m = config_.mla_config;
  // Multiply-adds per position and head: the up-projection (once per chunk
  // in the expanded form, and as the absorbed form's own maps once per
  // query), and a query's attention in either form.
  const int64_t up_projection = (m.qk_nope_dim + m.v_head_dim) * m.kv_lora_rank;
  const int64_t absorbed_query = m.cache_dim() + m.kv_lora_rank, expanded_query = m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim;
  const auto worth_expanding = [&](int64_t t0, int64_t n) {
    if (!mla_expandable_ || mla_prefill_ == MlaPrefill::absorbed) return false;
    if (mla_prefill_ == MlaPrefill::expanded) return true;
    if (n < k_min_expanded_run) return false;
    const int64_t n_ctx = batch.positions[size_t(t0 + n - 1)] + 1;
    double query_positions = 0.0;  // sum over the run of each query's context
    for (int64_t t = t0; t < t0 + n; ++t) query_positions += double(batch.positions[size_t(t)] + 1);
    return double(up_projection) * double(n_ctx - n) <= double(absorbed_query - expanded_query) * query_positions;
  };
  mla_runs_.clear();
  const int64_t n_tokens = batch.n_tokens();
  for (int64_t t0 = 0; t0 < n_tokens;) {
    int64_t t1 = t0 + 1;  // one sequence's consecutive positions
    while (t1 < n_tokens && batch.seq_of_token[size_t(t1)] == batch.seq_of_token[size_t(t0)] &&
           batch.positions[size_t(t1)] == batch.positions[size_t(t1 - 1)] + 1) {
      ++t1;
    }
    const bool expanded = worth_expanding(t0, t1 - t0);
    if (!expanded && !mla_runs_.empty() && !mla_runs_.back().expanded) {
      mla_runs_.back().n += t1 - t0;
    } else {
      mla_runs_.push_back({t0, t1 - t0, expanded});
    }
    t0 = t1;
  }
}

}  // namespace ds
