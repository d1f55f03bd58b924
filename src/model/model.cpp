#include "model/model.h"

#include <algorithm>
#include <cmath>

namespace ds {

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& options, const BackendDecorator& decorate) {
  auto backend = create_backend(options.backend, options.n_threads);
  if (!backend.ok()) return backend.status();
  return load_on(path, options, decorate ? decorate(backend.take()) : backend.take());
}

Result<std::unique_ptr<Model>> Model::load_beside(const std::string& path, const ModelOptions& options, Model& other) {
  return load_on(path, options, other.backend_);
}

Result<std::unique_ptr<Model>> Model::load_on(const std::string& path, const ModelOptions& options, std::shared_ptr<Backend> backend) {
  return catching_exceptions("model", [&]() -> Result<std::unique_ptr<Model>> {
    auto file = GgufFile::open(path);
    if (!file.ok()) return file.status();
    auto config = ModelConfig::from_gguf(*file.value());
    if (!config.ok()) return config.status();
    std::unique_ptr<Model> model(new Model(config.value(), std::move(backend)));
    auto weights = ModelWeights::load(file.take(), model->config_, options.load_mode, options.interleave, *model->backend_);
    if (!weights.ok()) return weights.status();
    model->weights_ = weights.take();
    if (options.mla_prefill != MlaPrefill::automatic && !model->config_.mla) {
      return Status::error("model: an MLA form (--mla-prefill) was asked for, but this model has no multi-head latent "
                           "attention");
    }
    const auto& layers = model->weights_->layers;
    const bool every_layer_expands =
        std::all_of(layers.begin(), layers.end(), [](const LayerWeights& l) { return !l.k_up.empty(); });
    model->mla_expandable_ = model->config_.mla && model->backend_->expands_mla() && every_layer_expands;
    if (options.mla_prefill == MlaPrefill::expanded && !model->mla_expandable_) {
      const std::string why = model->backend_->expands_mla() ? "needs every attn_k_b in a float or block type, not I8"
                                                               : "is not implemented on " + model->backend_->name();
      return Status::error("model: the expanded MLA form (--mla-prefill expanded) " + why);
    }
    model->mla_prefill_ = options.mla_prefill;
    return model;
  });
}

Model::Model(const ModelConfig& config, std::shared_ptr<Backend> backend) : config_(config), backend_(std::move(backend)) {}

Status Model::DeviceArray::reserve(Backend& backend, int64_t n) {
  const size_t bytes = size_t(n) * sizeof(float);
  if (buffer_.bytes() >= bytes) return Status();
  auto grown = backend.allocate(bytes);
  if (!grown.ok()) return grown.status();
  buffer_ = grown.take();
  return Status();
}

Status Model::ensure_workspace(int64_t n, int64_t n_logits, int64_t n_hidden) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  int64_t ff = c.n_ff, attn = c.q_dim();
  if (c.mla) {
    const MlaConfig& m = c.mla_config;
    DS_RETURN_IF_ERROR(q_a_.reserve(b, n * m.q_lora_rank));
    DS_RETURN_IF_ERROR(latent_.reserve(b, n * m.cache_dim()));
    DS_RETURN_IF_ERROR(q_full_.reserve(b, n * c.n_head * m.cache_dim()));
    DS_RETURN_IF_ERROR(attn_latent_.reserve(b, n * c.n_head * m.kv_lora_rank));
    attn = std::max(attn, c.n_head * m.v_head_dim);
  }
  if (c.moe.n_expert > 0) {
    DS_RETURN_IF_ERROR(router_logits_.reserve(b, n * c.moe.n_expert));
    DS_RETURN_IF_ERROR(shared_out_.reserve(b, n * c.n_embd));
    ff = std::max(ff, c.moe.expert_ff * std::max<int64_t>(1, c.moe.n_expert_shared));
  }
  DS_RETURN_IF_ERROR(x_.reserve(b, n * c.n_embd));
  DS_RETURN_IF_ERROR(h_.reserve(b, n * c.n_embd));
  DS_RETURN_IF_ERROR(q_.reserve(b, n * c.q_dim()));
  DS_RETURN_IF_ERROR(k_.reserve(b, n * c.kv_dim()));
  DS_RETURN_IF_ERROR(v_.reserve(b, n * c.kv_dim()));
  DS_RETURN_IF_ERROR(attn_.reserve(b, n * attn));
  DS_RETURN_IF_ERROR(proj_.reserve(b, n * c.n_embd));
  DS_RETURN_IF_ERROR(gate_.reserve(b, n * ff));
  DS_RETURN_IF_ERROR(up_.reserve(b, n * ff));
  DS_RETURN_IF_ERROR(last_.reserve(b, std::max(n_logits, n_hidden) * c.n_embd));
  return logits_.reserve(b, n_logits * c.n_vocab);
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
  Backend& b = *backend_;
  const int64_t n = batch.n_tokens();
  const int64_t n_logits = int64_t(batch.logit_tokens.size());
  StepIndex step;
  {
    TraceScope scope(trace_, "validate_and_workspace");
    DS_RETURN_IF_ERROR(validate(batch, cache));
    DS_RETURN_IF_ERROR(ensure_workspace(n, n_logits, hidden ? int64_t(batch.hidden_tokens.size()) : 0));
    int64_t n_ctx = 0;
    for (int32_t p : batch.positions) n_ctx = std::max<int64_t>(n_ctx, p + 1);
    step = b.upload_step(StepIndex{n, n_ctx, batch.tokens.data(), batch.positions.data(), batch.seq_of_token.data(),
                                   batch.block_tables.data(), int64_t(batch.block_tables.size())});
    if (c.mla) plan_mla_runs(batch);
  }
  {
    TraceScope scope(trace_, "embed", dtype_name(weights_->token_embd.type));
    b.embed(weights_->token_embd, step, x_.data());
  }

  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    TraceScope scope(trace_, "layer", c.moe.is_moe_layer(layer) ? "moe" : "dense");
    attention_block(layer, step, cache);
    ffn_block(layer, n);
    if (observer) {
      host_rows_.resize(size_t(n * c.n_embd));
      b.download(host_rows_.data(), x_.data(), host_rows_.size() * sizeof(float));
      observer(layer, host_rows_.data(), n);
    }
  }

  const auto final_norm = [&](const std::vector<int32_t>& rows, float* out) {
    TraceScope scope(trace_, "rms_norm");
    b.gather_rows(x_.data(), c.n_embd, rows.data(), int64_t(rows.size()), last_.data());
    b.rms_norm(last_.data(), c.n_embd, weights_->output_norm.data, c.norm_eps, int64_t(rows.size()), c.n_embd, out, c.n_embd);
  };
  if (hidden && !batch.hidden_tokens.empty()) {
    final_norm(batch.hidden_tokens, last_.data());
    b.download(hidden, last_.data(), batch.hidden_tokens.size() * size_t(c.n_embd) * sizeof(float));
  }
  if (n_logits == 0) return Status();
  final_norm(batch.logit_tokens, last_.data());
  traced_matmul(weights_->output, last_.data(), n_logits, logits_.data());
  b.download(logits, logits_.data(), size_t(n_logits * c.n_vocab) * sizeof(float));
  return Status();
}

void Model::traced_matmul(const WeightMatrix& w, const float* in, int64_t n, float* out) {
  TraceScope scope(trace_, "matmul", dtype_name(w.type));
  backend_->matmul(w, in, n, out);
}

void Model::rms_norm_rows(const float* in, const WeightVector& weight, int64_t n, int64_t dim, int64_t stride, float* out) {
  TraceScope scope(trace_, "rms_norm");
  backend_->rms_norm(in, stride, weight.data, config_.norm_eps, n, dim, out, stride);
}

void Model::attention_block(int64_t layer, const StepIndex& step, KvCache& cache) {
  if (config_.mla) return mla_attention_block(layer, step, cache);
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  const int64_t n = step.n_tokens;
  rms_norm_rows(x_.data(), w.attn_norm, n, c.n_embd, c.n_embd, h_.data());
  traced_matmul(w.wq, h_.data(), n, q_.data());
  traced_matmul(w.wk, h_.data(), n, k_.data());
  traced_matmul(w.wv, h_.data(), n, v_.data());
  if (!w.bq.empty() || !w.bk.empty() || !w.bv.empty()) {
    TraceScope scope(trace_, "bias");
    if (!w.bq.empty()) b.add_bias(q_.data(), w.bq.data, n, c.q_dim());
    if (!w.bk.empty()) b.add_bias(k_.data(), w.bk.data, n, c.kv_dim());
    if (!w.bv.empty()) b.add_bias(v_.data(), w.bv.data, n, c.kv_dim());
  }
  const KvLayerView kv = cache.layer(layer);
  {
    TraceScope scope(trace_, "rope_kv_write");
    const HeadRows q{q_.data(), c.n_head, c.head_dim, c.q_dim(), c.head_dim};
    const HeadRows k{k_.data(), c.n_head_kv, c.head_dim, c.kv_dim(), c.head_dim};
    b.rope_kv_write(c.rope, step, q, k, kv, k_.data(), v_.data());
  }
  {
    TraceScope scope(trace_, "attention");
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
    b.paged_attention(kv, shape, step, q_.data(), attn_.data());
  }
  traced_matmul(w.wo, attn_.data(), n, proj_.data());
  residual_add(proj_.data(), n);
}

void Model::residual_add(const float* block_out, int64_t n) {
  TraceScope scope(trace_, "add");
  backend_->add(x_.data(), block_out, n * config_.n_embd);
}

void Model::ffn_block(int64_t layer, int64_t n) {
  if (config_.moe.is_moe_layer(layer)) return moe_ffn_block(layer, n);
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  rms_norm_rows(x_.data(), w.ffn_norm, n, c.n_embd, c.n_embd, h_.data());
  gated_ffn(w.w_gate, w.w_up, w.w_down, h_.data(), n, proj_.data());
  residual_add(proj_.data(), n);
}

void Model::gated_ffn(const WeightMatrix& w_gate, const WeightMatrix& w_up, const WeightMatrix& w_down, const float* in, int64_t n,
                      float* out) {
  traced_matmul(w_gate, in, n, gate_.data());
  traced_matmul(w_up, in, n, up_.data());
  {
    TraceScope scope(trace_, "silu_mul");
    backend_->silu_mul(gate_.data(), up_.data(), n * w_gate.n_rows);
  }
  traced_matmul(w_down, gate_.data(), n, out);
}

}  // namespace ds
