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

#include "model/blocks/mla_attention.h"

#include <algorithm>
#include <cmath>

namespace ds {

Status read_mla_config(const ConfigReader& r, ModelConfig& c) {
  MlaConfig& m = c.mla;
  // 0 means no query LoRA (as llama.cpp reads it): the query comes from one matrix.
  DS_RETURN_IF_ERROR(r.uint_in("attention.q_lora_rank", 0, uint64_t(ConfigReader::k_max_dim), &m.q_lora_rank));
  DS_RETURN_IF_ERROR(r.dim("attention.kv_lora_rank", &m.kv_lora_rank));
  DS_RETURN_IF_ERROR(r.dim("rope.dimension_count", &m.qk_rope_dim));
  // Files with the split k_b/v_b tensors give the per-head sizes as *_mla and
  // the cache's as key/value_length; files with kv_b give the per-head ones.
  int64_t key_length = 0;
  const bool split = r.has("attention.key_length_mla");
  DS_RETURN_IF_ERROR(r.dim(split ? "attention.key_length_mla" : "attention.key_length", &key_length));
  DS_RETURN_IF_ERROR(r.dim(split ? "attention.value_length_mla" : "attention.value_length", &m.v_head_dim));
  if (key_length <= m.qk_rope_dim || m.qk_rope_dim % 2 != 0) {
    return Status::error("model: " + r.prefix() + "attention key length " + std::to_string(key_length) +
                         " must exceed an even rope.dimension_count " + std::to_string(m.qk_rope_dim));
  }
  m.qk_nope_dim = key_length - m.qk_rope_dim;
  c.head_dim = key_length;
  c.n_head_kv = c.n_head;
  c.kv = KvRowShape{m.cache_dim(), 0, 1, /*latent=*/true, {}};
  DS_RETURN_IF_ERROR(read_rope(r, m.qk_rope_dim, c));

  // DeepSeek's YaRN (HF modeling_deepseek): RoPE keeps unit magnitude
  // (its mscale equals mscale_all_dim in every released config) and the
  // softmax scale grows by mscale_all_dim's correction, squared. GGUF stores
  // 0.1 * mscale_all_dim as yarn_log_multiplier.
  m.kq_scale = 1.0f / std::sqrt(float(m.qk_nope_dim + m.qk_rope_dim));
  if (c.rope.scaling == RopeScaling::yarn) {
    auto log_mul = r.bounded_float("rope.scaling.yarn_log_multiplier", 0.0, -10.0, 10.0);
    if (!log_mul.ok()) return log_mul.status();
    const float log_factor = std::log(c.rope.scaling_factor);
    c.rope.yarn_attn_factor = 1.0f / (1.0f + 0.1f * log_factor);  // cancels the rope kernel's own correction
    const float mscale = 1.0f + float(log_mul.value()) * log_factor;
    m.kq_scale *= mscale * mscale;
  }
  return Status();
}

Status load_mla(TensorLoader& loader, const ModelConfig& c, const std::string& b, MlaWeights* w) {
  const MlaConfig& m = c.mla;
  const int64_t q_head = m.qk_nope_dim + m.qk_rope_dim;
  // Under tensor parallel this rank's heads, [h0, h0 + n_head) of the file's
  // file_heads; the latent (kv_a) is every rank's whole.
  const int64_t h0 = c.ranks.rank * c.n_head, file_heads = c.n_head * c.ranks.ranks;
  if (m.q_lora_rank > 0) {
    DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q_a.weight", m.q_lora_rank, c.n_embd, &w->wq_a));
    DS_RETURN_IF_ERROR(loader.vector(b + "attn_q_a_norm.weight", m.q_lora_rank, &w->q_a_norm));
    DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q_b.weight", c.n_head * q_head, m.q_lora_rank, &w->wq_b, true, Split::rows));
  } else {
    DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q.weight", c.n_head * q_head, c.n_embd, &w->wq, true, Split::rows));
  }
  DS_RETURN_IF_ERROR(loader.matrix(b + "attn_kv_a_mqa.weight", m.cache_dim(), c.n_embd, &w->wkv_a));
  DS_RETURN_IF_ERROR(loader.vector(b + "attn_kv_a_norm.weight", m.kv_lora_rank, &w->kv_a_norm));
  DS_RETURN_IF_ERROR(loader.matrix(b + "attn_output.weight", c.n_embd, c.n_head * m.v_head_dim, &w->wo, true, Split::columns));
  // The absorbed form multiplies queries by k_b (per head [kv_lora, nope]) and
  // attended latents by v_b (per head [v_head, kv_lora]); the expanded one
  // up-projects latents with k_up (per head [nope, kv_lora], k_b transposed) and v_b.
  w->k_b.resize(size_t(c.n_head));
  w->k_up.resize(size_t(c.n_head));
  if (loader.find(b + "attn_k_b.weight")) {  // the split layout, as the absorbed form wants it
    // A file may carry the combined kv_b beside it (llama.cpp reads it optionally and, given k_b and
    // v_b, computes with those): the same weights, known, not read.
    loader.find(b + "attn_kv_b.weight");
    auto k_b = loader.stacked(b + "attn_k_b.weight", file_heads, m.kv_lora_rank, m.qk_nope_dim);
    if (!k_b.ok()) return k_b.status();
    auto v_b = loader.stacked(b + "attn_v_b.weight", file_heads, m.v_head_dim, m.kv_lora_rank);
    if (!v_b.ok()) return v_b.status();
    const bool expandable = k_b.value()->type != DType::i8;  // W8A8 attention: the absorbed form only
    if (!expandable) w->k_up.clear();
    w->v_b.resize(size_t(c.n_head));
    for (int64_t h = 0; h < c.n_head; ++h) {
      DS_RETURN_IF_ERROR(loader.rows(k_b.value(), (h0 + h) * m.kv_lora_rank, m.kv_lora_rank, &w->k_b[size_t(h)]));
      if (expandable) {
        DS_RETURN_IF_ERROR(loader.transposed_rows(k_b.value(), (h0 + h) * m.kv_lora_rank, m.kv_lora_rank, &w->k_up[size_t(h)]));
      }
      DS_RETURN_IF_ERROR(loader.rows(v_b.value(), (h0 + h) * m.v_head_dim, m.v_head_dim, &w->v_b[size_t(h)]));
    }
    return Status();
  }
  // The combined kv_b: per head, nope rows of the key then v_head rows of the
  // value, each over the latent: k_up and v_b as they are, k_b transposed out
  // of it as llama.cpp's converter would write the split layout.
  auto kv_b = loader.stacked(b + "attn_kv_b.weight", 1, file_heads * (m.qk_nope_dim + m.v_head_dim), m.kv_lora_rank);
  if (!kv_b.ok()) return kv_b.status();
  w->v_b.resize(size_t(c.n_head));
  for (int64_t h = 0; h < c.n_head; ++h) {
    const int64_t first = (h0 + h) * (m.qk_nope_dim + m.v_head_dim);
    DS_RETURN_IF_ERROR(loader.transposed_rows(kv_b.value(), first, m.qk_nope_dim, &w->k_b[size_t(h)]));
    DS_RETURN_IF_ERROR(loader.rows(kv_b.value(), first, m.qk_nope_dim, &w->k_up[size_t(h)]));
    DS_RETURN_IF_ERROR(loader.rows(kv_b.value(), first + m.qk_nope_dim, m.v_head_dim, &w->v_b[size_t(h)]));
  }
  return Status();
}

Status MlaAttention::configure(Backend& backend, const std::vector<const MlaWeights*>& layers) {
  const bool every_layer_expands =
      std::all_of(layers.begin(), layers.end(), [](const MlaWeights* l) { return !l->k_up.empty(); });
  expandable_ = backend.expands_mla() && every_layer_expands;
  if (prefill_ == MlaPrefill::expanded && !expandable_) {
    const std::string why = backend.expands_mla() ? "needs every attn_k_b in a float or block type, not I8"
                                                  : "is not implemented on " + backend.name();
    return Status::error("model: the expanded MLA form (--mla-prefill expanded) " + why);
  }
  return Status();
}

Status MlaAttention::reserve(Backend& b, int64_t n) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  DS_RETURN_IF_ERROR(q_.reserve(b, n * c.n_head * (m.qk_nope_dim + m.qk_rope_dim)));
  DS_RETURN_IF_ERROR(q_a_.reserve(b, n * m.q_lora_rank));
  DS_RETURN_IF_ERROR(latent_.reserve(b, n * m.cache_dim()));
  DS_RETURN_IF_ERROR(q_full_.reserve(b, n * c.n_head * m.cache_dim()));
  DS_RETURN_IF_ERROR(attn_latent_.reserve(b, n * c.n_head * m.kv_lora_rank));
  return attn_.reserve(b, n * c.n_head * m.v_head_dim);
}

void MlaAttention::project(const ForwardContext& ctx, const MlaWeights& w, const StepIndex& step, const KvLayerView& kv) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  Backend& b = ctx.backend;
  const int64_t n = step.n_tokens;
  const int64_t q_head = m.qk_nope_dim + m.qk_rope_dim, row = m.cache_dim(), q_row = c.n_head * q_head;

  // Queries [n, n_head, nope | rope], through the low-rank pair when the model has one.
  if (m.q_lora_rank > 0) {
    ctx.matmul(w.wq_a, ctx.h, n, q_a_.data());
    ctx.rms_norm(q_a_.data(), w.q_a_norm, n, m.q_lora_rank, m.q_lora_rank, q_a_.data());
    ctx.matmul(w.wq_b, q_a_.data(), n, q_.data());
  } else {
    ctx.matmul(w.wq, ctx.h, n, q_.data());
  }
  // The cache rows: latent (normalised) then the RoPE key.
  ctx.matmul(w.wkv_a, ctx.h, n, latent_.data());
  ctx.rms_norm(latent_.data(), w.kv_a_norm, n, m.kv_lora_rank, row, latent_.data());
  {
    TraceScope scope(ctx.trace, "rope_kv_write");
    const HeadRows q_pe{q_.data() + m.qk_nope_dim, c.n_head, m.qk_rope_dim, q_row, q_head};
    const HeadRows k_pe{latent_.data() + m.kv_lora_rank, 1, m.qk_rope_dim, row, m.qk_rope_dim};
    b.rope_kv_write(c.rope, step, q_pe, k_pe, kv, latent_.data(), nullptr);
  }
}

void MlaAttention::attend(const ForwardContext& ctx, const MlaWeights& w, const StepIndex& step, const KvLayerView& kv,
                          const PositionSelection* selection) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  Backend& b = ctx.backend;
  const int64_t n = step.n_tokens;
  const int64_t q_head = m.qk_nope_dim + m.qk_rope_dim, q_row = c.n_head * q_head;
  if (selection) {
    absorbed(ctx, w, kv, step, 0, n, selection);
    ctx.matmul(w.wo, attn_.data(), n, ctx.out);
    return;
  }
  const AttentionShape expanded{c.n_head, c.n_head, q_head, m.kq_scale, m.v_head_dim};
  for (const Run& run : runs_) {
    if (!run.expanded) {
      absorbed(ctx, w, kv, step, run.t0, run.n, nullptr);
      continue;
    }
    TraceScope scope(ctx.trace, "attention", "mla_expanded");
    b.mla_expanded_attention(kv, expanded, step, run.t0, run.n, q_.data(), q_row, w.k_up.data(), w.v_b.data(), attn_.data(),
                             c.n_head * m.v_head_dim);
  }
  ctx.matmul(w.wo, attn_.data(), n, ctx.out);
}

void MlaAttention::absorbed(const ForwardContext& ctx, const MlaWeights& w, const KvLayerView& kv, const StepIndex& step, int64_t t0,
                            int64_t n, const PositionSelection* selection) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  Backend& b = ctx.backend;
  const int64_t q_head = m.qk_nope_dim + m.qk_rope_dim, row = m.cache_dim(), q_row = c.n_head * q_head;
  float* q = q_.data() + t0 * q_row;
  float* q_full = q_full_.data() + t0 * c.n_head * row;
  float* attn_latent = attn_latent_.data() + t0 * c.n_head * m.kv_lora_rank;
  // Absorbed queries [n, n_head, latent | rope], the layout of a cache row.
  {
    TraceScope scope(ctx.trace, "mla_absorb_queries", dtype_name(w.k_b[0].type));
    b.matmul_batched(w.k_b.data(), c.n_head, q, q_row, q_head, n, q_full, c.n_head * row, row);
    b.copy_heads(HeadRows{q_full + m.kv_lora_rank, c.n_head, m.qk_rope_dim, c.n_head * row, row},
                 HeadRows{q + m.qk_nope_dim, c.n_head, m.qk_rope_dim, q_row, q_head}, n);
  }
  {
    TraceScope scope(ctx.trace, "attention", "mla");
    StepIndex run = step;
    run.n_tokens = n;
    run.tokens += t0, run.positions += t0, run.seq_of_token += t0;
    const AttentionShape shape{c.n_head, 1, row, m.kq_scale, m.kv_lora_rank};
    if (selection) {
      b.sparse_attention(kv, shape, run, q_full, selection->selected + t0 * selection->top_k, selection->n_selected + t0,
                         selection->top_k, attn_latent);
    } else {
      b.paged_attention(kv, shape, run, q_full, attn_latent);
    }
  }
  // Each head's attended latent back to values.
  {
    TraceScope scope(ctx.trace, "mla_latent_to_values", dtype_name(w.v_b[0].type));
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

void MlaAttention::plan(const Batch& batch) {
  const MlaConfig& m = config_.mla;
  // Multiply-adds per position and head: the up-projection (once per chunk
  // in the expanded form, and as the absorbed form's own maps once per
  // query), and a query's attention in either form.
  const int64_t up_projection = (m.qk_nope_dim + m.v_head_dim) * m.kv_lora_rank;
  const int64_t absorbed_query = m.cache_dim() + m.kv_lora_rank, expanded_query = m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim;
  const auto worth_expanding = [&](int64_t t0, int64_t n) {
    if (!expandable_ || prefill_ == MlaPrefill::absorbed) return false;
    if (prefill_ == MlaPrefill::expanded) return true;
    if (n < k_min_expanded_run) return false;
    const int64_t n_ctx = batch.positions[size_t(t0 + n - 1)] + 1;
    double query_positions = 0.0;  // sum over the run of each query's context
    for (int64_t t = t0; t < t0 + n; ++t) query_positions += double(batch.positions[size_t(t)] + 1);
    return double(up_projection) * double(n_ctx - n) <= double(absorbed_query - expanded_query) * query_positions;
  };
  runs_.clear();
  const int64_t n_tokens = batch.n_tokens();
  for (int64_t t0 = 0; t0 < n_tokens;) {
    int64_t t1 = t0 + 1;  // one sequence's consecutive positions
    while (t1 < n_tokens && batch.seq_of_token[size_t(t1)] == batch.seq_of_token[size_t(t0)] &&
           batch.positions[size_t(t1)] == batch.positions[size_t(t1 - 1)] + 1) {
      ++t1;
    }
    const bool expanded = worth_expanding(t0, t1 - t0);
    if (!expanded && !runs_.empty() && !runs_.back().expanded) {
      runs_.back().n += t1 - t0;
    } else {
      runs_.push_back({t0, t1 - t0, expanded});
    }
    t0 = t1;
  }
}

}  // namespace ds
