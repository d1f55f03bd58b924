#include "model/model.h"

#include <algorithm>

#include "parallel/device_ranks.h"

namespace ds {

RankLayout rank_layout(const ModelOptions& options) {
  if (!options.collective) return RankLayout{};
  return RankLayout{options.collective->rank(), options.collective->size(), options.expert_parallel};
}

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
    if (options.nextn_rows) DS_RETURN_IF_ERROR(config.value().cache_nextn_rows());
    if (options.collective) DS_RETURN_IF_ERROR(config.value().split_across(rank_layout(options)));
    return build(file.take(), config.value(), options, std::move(backend), nullptr);
  });
}

Result<std::unique_ptr<Model>> Model::load_nextn(const ModelOptions& options, Model& target) {
  const ModelConfig& t = target.config_;
  if (t.kv.nextn_layers == 0) return Status::error("model: the target keeps no rows for its multi-token-prediction layer (nextn_rows)");
  return catching_exceptions("model", [&]() -> Result<std::unique_ptr<Model>> {
    auto file = GgufFile::open(target.file().path());
    if (!file.ok()) return file.status();
    ModelConfig c = t;
    c.first_block = t.n_layer;
    c.n_layer = t.n_nextn_layer;
    c.n_nextn_layer = 0;
    c.moe.leading_dense = std::max<int64_t>(0, c.moe.leading_dense - c.first_block);
    return build(file.take(), c, options, target.backend_, target.weights_.get());
  });
}

Result<std::unique_ptr<Model>> Model::build(std::unique_ptr<GgufFile> file, const ModelConfig& config, const ModelOptions& options,
                                            std::shared_ptr<Backend> backend, const ModelWeights* target) {
  std::unique_ptr<Model> model(new Model(config, std::move(backend)));
  DS_RETURN_IF_ERROR(check_forward_ops(model->config_, *model->backend_));
  auto layers = model->config_.family->make_layers(model->config_, options, *model->backend_);
  if (!layers.ok()) return layers.status();
  model->layers_ = layers.take();
  model->collective_ = options.collective && options.collective->size() > 1 ? options.collective : nullptr;
  if (model->collective_) {
    auto device_ranks = join_device_ranks(*model->backend_, *model->collective_);
    if (!device_ranks.ok()) return device_ranks.status();
    model->device_ranks_ = device_ranks.take();
  }
  auto weights = ModelWeights::load(std::move(file), model->config_, *model->layers_, options.load_mode, options.interleave,
                                    *model->backend_, target);
  if (!weights.ok()) return weights.status();
  model->weights_ = weights.take();
  return model;
}

Model::Model(const ModelConfig& config, std::shared_ptr<Backend> backend) : config_(config), backend_(std::move(backend)) {}

Status Model::ensure_workspace(int64_t n, int64_t n_logits, int64_t n_hidden) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  DS_RETURN_IF_ERROR(layers_->reserve(n));
  DS_RETURN_IF_ERROR(x_.reserve(b, n * c.n_embd));
  DS_RETURN_IF_ERROR(h_.reserve(b, n * c.n_embd));
  DS_RETURN_IF_ERROR(out_.reserve(b, n * c.n_embd));
  DS_RETURN_IF_ERROR(last_.reserve(b, std::max(n_logits, n_hidden) * c.n_embd));
  if (is_nextn()) DS_RETURN_IF_ERROR(pair_.reserve(b, n * 2 * c.n_embd));
  if (collective_) {
    DS_RETURN_IF_ERROR(logits_part_.reserve(b, n_logits * c.n_vocab / collective_->size()));
    DS_RETURN_IF_ERROR(gathered_logits_.reserve(b, n_logits * c.n_vocab));
  }
  return logits_.reserve(b, n_logits * c.n_vocab);
}

// Every window page a token reads, back to the horizon, is in the window pool.
Status Model::validate_window_tables(const Batch& batch, const KvCache& cache) const {
  if (batch.window_tables.empty()) {
    if (cache.n_window_pages() == 0 || cache.n_window_pages() == cache.n_pages()) return Status();
    return Status::error("forward: the cache has a window pool of its own, and the batch no window tables");
  }
  if (batch.window_tables.size() != batch.block_tables.size()) return Status::error("forward: window tables and block tables differ in number");
  const int64_t page_tokens = cache.page_tokens();
  for (int64_t t = 0; t < batch.n_tokens(); ++t) {
    const BlockTableView& table = batch.window_tables[size_t(batch.seq_of_token[t])];
    const int64_t p = batch.positions[t];
    for (int64_t block = std::max<int64_t>(0, p - config_.kv.horizon) / page_tokens; block <= p / page_tokens; ++block) {
      if (block >= table.n_pages || table.pages[block] < 0 || table.pages[block] >= cache.n_window_pages()) {
        return Status::error("forward: position " + std::to_string(p) + " reads a window page its table lacks");
      }
    }
  }
  return Status();
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
  DS_RETURN_IF_ERROR(validate_window_tables(batch, cache));
  if (cache.n_layers() < config_.first_block + config_.n_layer) {
    return Status::error("forward: the cache holds rows for " + std::to_string(cache.n_layers()) + " layers, not block " +
                         std::to_string(config_.first_block + config_.n_layer - 1) + "'s");
  }
  if (is_nextn() != (batch.previous_hidden != nullptr)) {
    return Status::error(is_nextn() ? "forward: a multi-token-prediction layer needs the previous hidden states"
                                    : "forward: previous hidden states are a multi-token-prediction layer's input");
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
  TraceScope forward_scope(batch.trace, "forward");
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const int64_t n = batch.n_tokens();
  const int64_t n_logits = int64_t(batch.logit_tokens.size());
  StepIndex step;
  {
    TraceScope scope(batch.trace, "validate_and_workspace");
    DS_RETURN_IF_ERROR(validate(batch, cache));
    DS_RETURN_IF_ERROR(ensure_workspace(n, n_logits, hidden ? int64_t(batch.hidden_tokens.size()) : 0));
    int64_t n_ctx = 0;
    for (int32_t p : batch.positions) n_ctx = std::max<int64_t>(n_ctx, p + 1);
    const BlockTableView* window_tables = batch.window_tables.empty() ? batch.block_tables.data() : batch.window_tables.data();
    step = b.upload_step(StepIndex{n, n_ctx, batch.tokens.data(), batch.positions.data(), batch.seq_of_token.data(),
                                   batch.block_tables.data(), int64_t(batch.block_tables.size()), window_tables});
    layers_->begin_step(batch);
  }
  {
    TraceScope scope(batch.trace, "embed", dtype_name(weights_->token_embd.type));
    b.embed(weights_->token_embd, step, x_.data());
  }

  const ForwardContext ctx{b, c, batch.trace, x_.data(), h_.data(), out_.data(), forward_ranks()};
  if (is_nextn()) mix_previous_hidden(batch, ctx);
  batch.yielded = false;
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    // Never between ranks' collectives: every rank must run every layer.
    if (batch.yield && !collective_ && batch.yield->load(std::memory_order_relaxed)) {
      batch.yielded = true;
      return Status();
    }
    TraceScope scope(batch.trace, "layer", layers_->layer_kind(layer));
    layers_->run_layer(layer, ctx, step, cache);
    if (observer) {
      host_rows_.resize(size_t(n * c.n_embd));
      b.download(host_rows_.data(), x_.data(), host_rows_.size() * sizeof(float));
      observer(layer, host_rows_.data(), n);
    }
  }

  const auto final_norm = [&](const std::vector<int32_t>& rows, float* out) {
    TraceScope scope(batch.trace, "rms_norm");
    b.gather_rows(x_.data(), c.n_embd, rows.data(), int64_t(rows.size()), last_.data());
    b.rms_norm(last_.data(), c.n_embd, weights_->output_norm.data, c.norm_eps, int64_t(rows.size()), c.n_embd, out, c.n_embd);
  };
  if (hidden && !batch.hidden_tokens.empty()) {
    if (is_nextn()) {
      b.gather_rows(x_.data(), c.n_embd, batch.hidden_tokens.data(), int64_t(batch.hidden_tokens.size()), last_.data());
    } else {
      final_norm(batch.hidden_tokens, last_.data());
    }
    b.download(hidden, last_.data(), batch.hidden_tokens.size() * size_t(c.n_embd) * sizeof(float));
  }
  if (n_logits == 0) return Status();
  final_norm(batch.logit_tokens, last_.data());
  if (collective_) {
    gather_logits(ctx, n_logits);
  } else {
    ctx.matmul(weights_->output, last_.data(), n_logits, logits_.data());
  }
  if (logits) b.download(logits, logits_.data(), size_t(n_logits * c.n_vocab) * sizeof(float));
  return Status();
}

void Model::gather_logits(const ForwardContext& ctx, int64_t n_logits) {
  const int ranks = ctx.collective->size();
  const int64_t part = config_.n_vocab / ranks;
  ctx.matmul(weights_->output, last_.data(), n_logits, logits_part_.data());
  TraceScope scope(ctx.trace, "all_gather");
  ctx.collective->all_gather(logits_part_.data(), n_logits * part, gathered_logits_.data());
  // Rank r's part of row t, at gathered (r, t), goes to logits (t, r): a head of `part` per rank.
  const HeadRows gathered{gathered_logits_.data(), ranks, part, part, n_logits * part};
  const HeadRows rows{logits_.data(), ranks, part, config_.n_vocab, part};
  ctx.backend.copy_heads(rows, gathered, n_logits);
}

void Model::mix_previous_hidden(const Batch& batch, const ForwardContext& ctx) {
  TraceScope scope(batch.trace, "nextn_input");
  const int64_t n = batch.n_tokens(), d = config_.n_embd;
  const NextnInput& w = weights_->nextn;
  // [enorm(embedding); hnorm(hidden)], in that order as vLLM's and SGLang's DeepSeek MTP concatenate them.
  Backend& b = *backend_;
  b.rms_norm(x_.data(), d, w.enorm.data, config_.norm_eps, n, d, pair_.data(), 2 * d);
  b.upload(out_.data(), batch.previous_hidden, size_t(n * d) * sizeof(float));
  b.rms_norm(out_.data(), d, w.hnorm.data, config_.norm_eps, n, d, pair_.data() + d, 2 * d);
  ctx.matmul(w.eh_proj, pair_.data(), n, x_.data());
}

}  // namespace ds
