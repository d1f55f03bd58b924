#include "model/kv_cache.h"

namespace ds {

int64_t KvCache::bytes_per_token(const ModelConfig& config, DType dtype) {
  if (!config.kv.layer_streams.empty()) {
    int64_t bytes = 0;
    for (const auto& layer : config.kv.layer_streams) {
      for (const KvStream& s : layer) {
        if (!s.windowed) bytes += row_bytes(dtype, s.dim) / s.tokens_per_row;
      }
    }
    return bytes;
  }
  return (row_bytes(dtype, config.kv.k_dim) + row_bytes(dtype, config.kv.v_dim)) * (config.n_layer + config.kv.nextn_layers);
}

namespace {
// Bytes of one page of the streams that are (or are not) windowed.
int64_t streams_page_bytes(const ModelConfig& config, DType dtype, int64_t page_tokens, int64_t draft_tokens, bool windowed) {
  int64_t bytes = 0;
  for (const auto& layer : config.kv.layer_streams) {
    for (const KvStream& s : layer) {
      if (s.windowed == windowed) bytes += row_bytes(dtype, s.dim) * s.rows_per_page(page_tokens, draft_tokens);
    }
  }
  return bytes;
}
}  // namespace

int64_t KvCache::page_bytes(const ModelConfig& config, DType dtype, int64_t page_tokens) {
  if (config.kv.layer_streams.empty()) return bytes_per_token(config, dtype) * page_tokens;
  return streams_page_bytes(config, dtype, page_tokens, 0, false);
}

int64_t KvCache::window_page_bytes(const ModelConfig& config, const KvCacheOptions& options) {
  return streams_page_bytes(config, options.dtype, options.page_tokens, options.draft_tokens, true);
}

int64_t KvCache::window_pages_for_step(int64_t horizon, int64_t page_tokens, int64_t n_tokens) {
  // Positions [first - horizon, first + n_tokens) span at most this many pages
  // (the most where the range starts on a page's last slot).
  return (horizon + n_tokens + 2 * page_tokens - 2) / page_tokens;
}

int64_t KvCache::window_pages_per_sequence(const ModelConfig& config, int64_t page_tokens) {
  if (streams_page_bytes(config, DType::f32, page_tokens, 0, true) == 0) return 0;
  return window_pages_for_step(config.kv.horizon, page_tokens, 1);
}

int64_t KvCache::fixed_bytes_per_sequence(const ModelConfig& config, const KvCacheOptions& options) {
  return window_pages_per_sequence(config, options.page_tokens) * window_page_bytes(config, options);
}

int64_t KvCache::default_window_pages(const ModelConfig& config, int64_t page_tokens, int64_t max_seqs, int64_t max_step_tokens) {
  const int64_t per_sequence = window_pages_per_sequence(config, page_tokens);
  if (per_sequence == 0) return 0;
  // The step's tokens beyond one per sequence take pages of their own.
  return 2 * (max_seqs * per_sequence + (max_step_tokens + page_tokens - 1) / page_tokens);
}

Result<std::unique_ptr<KvCache>> KvCache::create(Backend& backend, const ModelConfig& config, const KvCacheOptions& options) {
  if (options.dtype != DType::f16 && options.dtype != DType::f32 && options.dtype != DType::q8_0) {
    return Status::error("kv cache: dtype must be f16, f32 or q8_0");
  }
  if (options.dtype == DType::q8_0 && (config.kv.latent || !config.kv.layer_streams.empty())) {
    return Status::error(std::string("kv cache: q8_0 is not implemented for a keys-only cache (") +
                         (config.kv.latent ? "the latent rows of multi-head latent attention" : "DeepSeek-V4's streams") +
                         "); use f16 or f32");
  }
  if (options.dtype == DType::q8_0 && config.head_dim % dtype_traits(DType::q8_0).block_elements != 0) {
    return Status::error("kv cache: q8_0 needs a head size that is a multiple of 32, the model's is " +
                         std::to_string(config.head_dim));
  }
  if (options.page_tokens <= 0 || options.page_tokens > 4096) return Status::error("kv cache: page size must be 1..4096 tokens");
  if (options.n_pages <= 0) return Status::error("kv cache: the pool needs at least one page");
  if (config.kv.nextn_layers > 0 && !config.kv.layer_streams.empty()) {
    return Status::error("kv cache: rows of multi-token-prediction layers beside per-layer streams are not implemented");
  }
  if (options.draft_tokens < 0) return Status::error("kv cache: draft tokens must not be negative");
  const int64_t window_bytes = window_page_bytes(config, options);
  const int64_t n_window_pages = window_bytes == 0 ? 0 : options.n_window_pages > 0 ? options.n_window_pages : options.n_pages;
  for (const auto& layer : config.kv.layer_streams) {
    for (const KvStream& s : layer) {
      // A page holds whole rows, or a row spans whole pages.
      const int64_t r = s.tokens_per_row, p = options.page_tokens;
      if (r > 1 && ((r <= p ? p % r : r % p) != 0 || (s.position_addressed && r > p))) {
        return Status::error("kv cache: a page of " + std::to_string(p) + " tokens does not fit this model's rows of one per " +
                             std::to_string(r) + " tokens (use --kv-page-tokens a multiple of " + std::to_string(r) + ")");
      }
    }
  }
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->backend_ = &backend;
  cache->options_ = options;
  cache->options_.n_window_pages = n_window_pages;
  cache->n_layer_ = config.n_layer + config.kv.nextn_layers;
  cache->k_dim_ = config.kv.k_dim;
  cache->v_dim_ = config.kv.v_dim;
  cache->n_kv_heads_ = config.kv.n_heads;
  cache->k_page_bytes_ = options.page_tokens * row_bytes(options.dtype, cache->k_dim_);
  cache->v_page_bytes_ = options.page_tokens * row_bytes(options.dtype, cache->v_dim_);
  cache->page_bytes_ = page_bytes(config, options.dtype, options.page_tokens);
  cache->window_page_bytes_ = n_window_pages > 0 ? window_bytes : 0;
  cache->streams_ = config.kv.layer_streams;
  int64_t offset = 0, window_offset = 0;  // in memory_, in window_memory_
  for (const auto& layer : cache->streams_) {
    cache->stream_offsets_.emplace_back();
    for (const KvStream& s : layer) {
      int64_t& at = s.windowed ? window_offset : offset;
      cache->stream_offsets_.back().push_back(at);
      const int64_t rows = s.rows_per_page(options.page_tokens, options.draft_tokens);
      cache->has_rings_ |= s.windowed && rows < options.page_tokens / s.tokens_per_row;
      at += row_bytes(options.dtype, s.dim) * rows * (s.windowed ? n_window_pages : options.n_pages);
    }
  }
  auto memory = backend.allocate(size_t(cache->page_bytes_ * options.n_pages));
  if (!memory.ok()) return Status::error("kv cache: " + memory.message());
  cache->memory_ = memory.take();
  if (n_window_pages > 0) {
    auto window_memory = backend.allocate(size_t(window_bytes * n_window_pages));
    if (!window_memory.ok()) return Status::error("kv cache: window pages: " + window_memory.message());
    cache->window_memory_ = window_memory.take();
  }
  return cache;
}

KvLayerView KvCache::layer(int64_t index) const {
  const size_t k_bytes = size_t(k_page_bytes_ * options_.n_pages), v_bytes = size_t(v_page_bytes_ * options_.n_pages);
  uint8_t* k = memory_.data() + size_t(index) * (k_bytes + v_bytes);
  // With MLA the latent rows are keys and values at once: v is null, or the
  // indexer's key stream (KvRowShape::latent), and kv_dim is the latent-plus-RoPE row.
  return KvLayerView{options_.dtype, k, v_dim_ > 0 ? k + k_bytes : nullptr, options_.page_tokens, k_dim_, n_kv_heads_};
}

template <typename Fn>
void KvCache::for_each_piece(int64_t page, bool windowed, Fn fn) const {
  if (streams_.empty()) {
    if (windowed) return;
    for (int64_t l = 0; l < n_layer_; ++l) {
      const KvLayerView view = layer(l);
      fn(view.k + page * k_page_bytes_, k_page_bytes_);
      if (view.v) fn(view.v + page * v_page_bytes_, v_page_bytes_);
    }
    return;
  }
  for (size_t l = 0; l < streams_.size(); ++l) {
    for (size_t s = 0; s < streams_[l].size(); ++s) {
      const KvStream& stream = streams_[l][s];
      if (stream.windowed != windowed) continue;
      const int64_t bytes = row_bytes(options_.dtype, stream.dim) * stream.rows_per_page(options_.page_tokens, options_.draft_tokens);
      fn((windowed ? window_memory_ : memory_).data() + stream_offsets_[l][s] + page * bytes, bytes);
    }
  }
}

void KvCache::read_page(int64_t page, uint8_t* host) const { download_pieces(page, false, host, page_bytes_); }

void KvCache::write_page(int64_t page, const uint8_t* host) { upload_pieces(page, false, host, page_bytes_); }

void KvCache::read_window_page(int64_t page, uint8_t* host) const { download_pieces(page, true, host, window_page_bytes_); }

void KvCache::write_window_page(int64_t page, const uint8_t* host) { upload_pieces(page, true, host, window_page_bytes_); }

void KvCache::download_pieces(int64_t page, bool windowed, uint8_t* host, int64_t expected) const {
  int64_t at = 0;
  for_each_piece(page, windowed, [&](const uint8_t* device, int64_t bytes) {
    backend_->download(host + at, device, size_t(bytes));
    at += bytes;
  });
  DS_CHECK(at == expected, "kv cache: a page's pieces do not add up to its bytes");
}

void KvCache::upload_pieces(int64_t page, bool windowed, const uint8_t* host, int64_t expected) {
  int64_t at = 0;
  for_each_piece(page, windowed, [&](uint8_t* device, int64_t bytes) {
    backend_->upload(device, host + at, size_t(bytes));
    at += bytes;
  });
  DS_CHECK(at == expected, "kv cache: a page's pieces do not add up to its bytes");
}

KvLayerView KvCache::stream(int64_t index, int64_t s) const {
  const KvStream& stream = streams_[size_t(index)][size_t(s)];
  uint8_t* rows = (stream.windowed ? window_memory_ : memory_).data() + stream_offsets_[size_t(index)][size_t(s)];
  return KvLayerView{options_.dtype, rows, nullptr, stream.rows_per_page(options_.page_tokens, options_.draft_tokens), stream.dim, 1};
}

}  // namespace ds
