#include "model/model.h"

#include <cmath>
#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& options) {
  return catching_exceptions("model", [&]() -> Result<std::unique_ptr<Model>> {
    auto file = GgufFile::open(path);
    if (!file.ok()) return file.status();
    auto config = ModelConfig::from_gguf(*file.value());
    if (!config.ok()) return config.status();
    auto weights = ModelWeights::load(file.take(), config.value(), options.load_mode, options.interleave);
    if (!weights.ok()) return weights.status();
    return std::unique_ptr<Model>(new Model(config.value(), weights.take(), options.n_threads));
  });
}

Model::Model(const ModelConfig& config, std::unique_ptr<ModelWeights> weights, int n_threads)
    : config_(config), weights_(std::move(weights)), pool_(n_threads) {}

void Model::ensure_workspace(int64_t n, int64_t n_logits) {
  const ModelConfig& c = config_;
  grow(x_, n * c.n_embd);
  grow(h_, n * c.n_embd);
  if (c.mla) {
    const MlaConfig& m = c.mla_config;
    grow(q_a_, n * m.q_lora_rank);
    grow(latent_, n * m.cache_dim());
    grow(q_pe_, n * c.n_head * m.qk_rope_dim);
    grow(head_in_, n * std::max(m.qk_nope_dim, m.kv_lora_rank));
    grow(head_out_, n * std::max(m.kv_lora_rank, m.v_head_dim));
    grow(q_full_, n * c.n_head * m.cache_dim());
    grow(attn_latent_, n * c.n_head * m.kv_lora_rank);
    grow(attn_, n * c.n_head * m.v_head_dim);
  }
  if (c.moe.n_expert > 0) {
    const MoeConfig& moe = c.moe;
    grow(router_logits_, n * moe.n_expert);
    grow(slot_out_, n * moe.n_expert_used * c.n_embd);
    grow(shared_out_, n * c.n_embd);
    grow(routed_expert_, n * moe.n_expert_used);
    grow(routed_weight_, n * moe.n_expert_used);
    grow(ffn_.gate, n * moe.expert_ff * std::max<int64_t>(1, moe.n_expert_shared));
    grow(ffn_.up, n * moe.expert_ff * std::max<int64_t>(1, moe.n_expert_shared));
    while (int(expert_workers_.size()) < pool_.n_threads()) expert_workers_.push_back(std::make_unique<ExpertWorker>());
    for (auto& worker : expert_workers_) {
      grow(worker->in, n * c.n_embd);
      grow(worker->out, n * c.n_embd);
      grow(worker->ffn.gate, n * moe.expert_ff);
      grow(worker->ffn.up, n * moe.expert_ff);
    }
  }
  grow(q_, n * c.q_dim());
  grow(k_, n * c.kv_dim());
  grow(v_, n * c.kv_dim());
  grow(attn_, n * c.q_dim());
  grow(proj_, n * c.n_embd);
  grow(ffn_.gate, n * c.n_ff);
  grow(ffn_.up, n * c.n_ff);
  grow(last_, n_logits * c.n_embd);
}

Status Model::validate(const Batch& batch, const KvCache& cache) const {
  const int64_t n = batch.n_tokens();
  if (n == 0) return Status::error("forward: empty batch");
  if (int64_t(batch.positions.size()) != n || int64_t(batch.seq_of_token.size()) != n) {
    return Status::error("forward: tokens, positions and seq_of_token differ in length");
  }
  for (int64_t t = 0; t < n; ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= config_.n_vocab) {
      return Status::error("forward: token id " + std::to_string(batch.tokens[t]) + " is outside the vocabulary of " +
                           std::to_string(config_.n_vocab));
    }
    const int32_t s = batch.seq_of_token[t];
    if (s < 0 || s >= int32_t(batch.block_tables.size())) return Status::error("forward: token has no block table");
    const int64_t pos = batch.positions[t];
    if (pos < 0 || pos / cache.page_tokens() >= batch.block_tables[size_t(s)].n_pages) {
      return Status::error("forward: position " + std::to_string(pos) + " has no KV page");
    }
  }
  for (const BlockTableView& table : batch.block_tables) {
    for (int32_t i = 0; i < table.n_pages; ++i) {
      if (table.pages[i] < 0 || table.pages[i] >= cache.n_pages()) return Status::error("forward: block table names a page outside the pool");
    }
  }
  for (int32_t t : batch.logit_tokens) {
    if (t < 0 || t >= n) return Status::error("forward: logit row outside the batch");
  }
  for (int32_t t : batch.hidden_tokens) {
    if (t < 0 || t >= n) return Status::error("forward: hidden-state row outside the batch");
  }
  return Status();
}

Status Model::forward(const Batch& batch, KvCache& cache, float* logits, const LayerObserver& observer, float* hidden) {
  trace_ = batch.trace;
  TraceScope forward_scope(trace_, "forward");
  const ModelConfig& c = config_;
  const int64_t n = batch.n_tokens();
  const int64_t n_logits = int64_t(batch.logit_tokens.size());
  {
    TraceScope scope(trace_, "validate_and_workspace");
    DS_RETURN_IF_ERROR(validate(batch, cache));
    ensure_workspace(n, n_logits);
  }

  const int64_t embd_row_bytes = weights_->token_embd.row_stride_bytes();
  {
    TraceScope scope(trace_, "embed", dtype_name(weights_->token_embd.type));
    pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        dequantize_row(weights_->token_embd.type, weights_->token_embd.data + batch.tokens[t] * embd_row_bytes,
                       x_.data() + t * c.n_embd, c.n_embd);
      }
    });
  }

  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    TraceScope scope(trace_, "layer", c.moe.is_moe_layer(layer) ? "moe" : "dense");
    attention_block(layer, batch, cache);
    ffn_block(layer, n);
    if (observer) observer(layer, x_.data(), n);
  }

  if (hidden) {
    TraceScope scope(trace_, "hidden_states");
    for (size_t i = 0; i < batch.hidden_tokens.size(); ++i) {
      const float* row = x_.data() + int64_t(batch.hidden_tokens[i]) * c.n_embd;
      rms_norm(row, weights_->output_norm.data(), c.norm_eps, 1, c.n_embd, hidden + int64_t(i) * c.n_embd);
    }
  }
  if (n_logits == 0) return Status();
  {
    TraceScope scope(trace_, "rms_norm");
    for (int64_t i = 0; i < n_logits; ++i) {
      std::memcpy(last_.data() + i * c.n_embd, x_.data() + int64_t(batch.logit_tokens[i]) * c.n_embd, c.n_embd * sizeof(float));
    }
    rms_norm(last_.data(), weights_->output_norm.data(), c.norm_eps, n_logits, c.n_embd, last_.data());
  }
  traced_matmul(weights_->output, last_.data(), n_logits, logits);
  return Status();
}

void Model::traced_matmul(const WeightMatrix& w, const float* in, int64_t n, float* out) {
  TraceScope scope(trace_, "matmul", dtype_name(w.type));
  matmul(pool_, w, in, n, out, matmul_scratch_);
}

void Model::rms_norm_rows(const float* in, const std::vector<float>& weight, int64_t n, int64_t dim, int64_t stride,
                          float* out) {
  TraceScope scope(trace_, "rms_norm");
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) rms_norm(in + t * stride, weight.data(), config_.norm_eps, 1, dim, out + t * stride);
  });
}

void Model::attention_block(int64_t layer, const Batch& batch, KvCache& cache) {
  if (config_.mla) return mla_attention_block(layer, batch, cache);
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  const int64_t n = batch.n_tokens();
  rms_norm_rows(x_.data(), w.attn_norm, n, c.n_embd, c.n_embd, h_.data());
  traced_matmul(w.wq, h_.data(), n, q_.data());
  traced_matmul(w.wk, h_.data(), n, k_.data());
  traced_matmul(w.wv, h_.data(), n, v_.data());
  if (!w.bq.empty() || !w.bk.empty() || !w.bv.empty()) {
    TraceScope scope(trace_, "bias");
    if (!w.bq.empty()) add_bias(q_.data(), w.bq.data(), n, c.q_dim());
    if (!w.bk.empty()) add_bias(k_.data(), w.bk.data(), n, c.kv_dim());
    if (!w.bv.empty()) add_bias(v_.data(), w.bv.data(), n, c.kv_dim());
  }

  int64_t n_ctx = 0;
  for (int32_t p : batch.positions) n_ctx = std::max<int64_t>(n_ctx, p + 1);
  const KvLayerView kv = cache.layer(layer);
  {
    TraceScope scope(trace_, "rope_kv_write");
    pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
      const int32_t* positions = batch.positions.data() + begin;
      rope(c.rope, q_.data() + begin * c.q_dim(), end - begin, c.n_head, c.head_dim, positions, n_ctx);
      rope(c.rope, k_.data() + begin * c.kv_dim(), end - begin, c.n_head_kv, c.head_dim, positions, n_ctx);
      kv_write(kv, k_.data() + begin * c.kv_dim(), v_.data() + begin * c.kv_dim(), end - begin, positions,
               batch.seq_of_token.data() + begin, batch.block_tables.data());
    });
  }
  {
    TraceScope scope(trace_, "attention");
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
    paged_attention(pool_, kv, shape, q_.data(), n, batch.positions.data(), batch.seq_of_token.data(),
                    batch.block_tables.data(), attn_.data(), attention_scratch_);
  }
  traced_matmul(w.wo, attn_.data(), n, proj_.data());
  residual_add(proj_.data(), n);
}

void Model::residual_add(const float* block_out, int64_t n) {
  TraceScope scope(trace_, "add");
  add_inplace(x_.data(), block_out, n * config_.n_embd);
}

void Model::ffn_block(int64_t layer, int64_t n) {
  if (config_.moe.is_moe_layer(layer)) return moe_ffn_block(layer, n);
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  rms_norm_rows(x_.data(), w.ffn_norm, n, c.n_embd, c.n_embd, h_.data());
  gated_ffn(pool_, ffn_, w.w_gate, w.w_up, w.w_down, h_.data(), n, proj_.data(), trace_);
  residual_add(proj_.data(), n);
}

void Model::gated_ffn(ThreadPool& pool, FfnWorkspace& ws, const WeightMatrix& w_gate, const WeightMatrix& w_up,
                      const WeightMatrix& w_down, const float* in, int64_t n, float* out, StepTrace* trace) {
  const int64_t ff = w_gate.n_rows;
  {
    TraceScope scope(trace, "matmul", dtype_name(w_gate.type));
    matmul(pool, w_gate, in, n, ws.gate.data(), ws.scratch);
  }
  {
    TraceScope scope(trace, "matmul", dtype_name(w_up.type));
    matmul(pool, w_up, in, n, ws.up.data(), ws.scratch);
  }
  {
    TraceScope scope(trace, "silu_mul");
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      silu_mul(ws.gate.data() + begin * ff, ws.up.data() + begin * ff, (end - begin) * ff);
    });
  }
  TraceScope scope(trace, "matmul", dtype_name(w_down.type));
  matmul(pool, w_down, ws.gate.data(), n, out, ws.scratch);
}

}  // namespace ds
