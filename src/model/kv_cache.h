#pragma once
// KV page memory, in the backend's memory: for each layer one K and one V buffer of n_pages pages of
// page_tokens slots (for multi-head latent attention the latent rows, and no V
// or, for DeepSeek-V3.2, its indexer's keys in the V buffer: KvRowShape). Which page belongs to which sequence is not known here:
// callers pass block tables (the engine's page pool decides them).

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "device/backend.h"
#include "kernels/paged_attention.h"
#include "model/model_config.h"

namespace ds {

struct KvCacheOptions {
  DType dtype = DType::f16;  // f16, f32, or q8_0 (blocks of 32 with an f16 scale: about half of f16)
  int64_t page_tokens = 16;
  int64_t n_pages = 0;
  // Window pages, for a family with windowed streams (KvStream::windowed):
  // 0, one per page (a caller that passes the same block table for both).
  int64_t n_window_pages = 0;
  // The most tokens a step writes past what its sequence keeps: speculative
  // decoding's draft tokens, which verification may reject. A ring stream
  // (KvStream::ring_horizon) keeps that many rows more.
  int64_t draft_tokens = 0;
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> create(Backend& backend, const ModelConfig& config, const KvCacheOptions& options);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  KvLayerView layer(int64_t index) const;
  // The model's layers and, after them, the multi-token-prediction layers it keeps rows for (KvRowShape::nextn_layers).
  int64_t n_layers() const { return n_layer_; }
  // Stream s of layer `index` of a family with per-layer streams
  // (KvRowShape::layer_streams): page_tokens there is its rows per page; a
  // windowed stream's pages are window pages.
  KvLayerView stream(int64_t index, int64_t s) const;
  int64_t n_pages() const { return options_.n_pages; }
  // 0: the family has no windowed streams.
  int64_t n_window_pages() const { return options_.n_window_pages; }
  int64_t page_tokens() const { return options_.page_tokens; }
  DType dtype() const { return options_.dtype; }
  const KvCacheOptions& options() const { return options_; }
  // Whether a step may write `n` draft tokens past what a sequence keeps
  // without overwriting a ring's rows still read (KvCacheOptions::draft_tokens).
  bool keeps_drafts(int64_t n) const { return !has_rings_ || n <= options_.draft_tokens; }
  // Bytes one page takes across all layers, keys and values.
  int64_t page_bytes() const { return page_bytes_; }
  // A page's page_bytes() in every layer (and stream not windowed), to or
  // from the host, in one fixed order: what the disk tier keeps of a page.
  void read_page(int64_t page, uint8_t* host) const;
  void write_page(int64_t page, const uint8_t* host);
  // The same for a window page (the windowed streams' rows of one block):
  // window_bytes() of them, 0 for a family without windowed streams.
  int64_t window_bytes() const { return window_page_bytes_; }
  void read_window_page(int64_t page, uint8_t* host) const;
  void write_window_page(int64_t page, const uint8_t* host);
  // One token's share of a page, averaged over the page (a stream with a row
  // per 128 tokens costs 1/128 of a row); windowed streams are not counted.
  static int64_t bytes_per_token(const ModelConfig& config, DType dtype);
  // Bytes one page (or one window page) of page_tokens tokens takes across all layers.
  static int64_t page_bytes(const ModelConfig& config, DType dtype, int64_t page_tokens);
  static int64_t window_page_bytes(const ModelConfig& config, const KvCacheOptions& options);
  // The most window pages a sequence holds in a step of n_tokens of its
  // tokens: the pages its horizon before them and they themselves span.
  static int64_t window_pages_for_step(int64_t horizon, int64_t page_tokens, int64_t n_tokens);
  // A decoding sequence's, where the family has windowed streams; else 0.
  static int64_t window_pages_per_sequence(const ModelConfig& config, int64_t page_tokens);
  // Its window pages' bytes: the fixed state of a sequence.
  static int64_t fixed_bytes_per_sequence(const ModelConfig& config, const KvCacheOptions& options);
  // The window pool for max_seqs sequences and steps of max_step_tokens:
  // what the sequences hold at once (KvCacheManager), twice over, so that
  // the ends of as many finished prompts stay cached for prefix reuse.
  static int64_t default_window_pages(const ModelConfig& config, int64_t page_tokens, int64_t max_seqs, int64_t max_step_tokens);

 private:
  KvCache() = default;
  // fn(device bytes, size) for each piece of a page (a window page's: `windowed`), in read_page's order.
  template <typename Fn>
  void for_each_piece(int64_t page, bool windowed, Fn fn) const;
  void download_pieces(int64_t page, bool windowed, uint8_t* host, int64_t expected) const;
  void upload_pieces(int64_t page, bool windowed, const uint8_t* host, int64_t expected);

  Backend* backend_ = nullptr;
  KvCacheOptions options_;
  int64_t n_layer_ = 0;
  int64_t k_dim_ = 0, v_dim_ = 0;  // elements per token and layer (v_dim_ = 0: MLA, keys only)
  int64_t n_kv_heads_ = 1;         // MLA: one latent row shared by all heads
  int64_t k_page_bytes_ = 0, v_page_bytes_ = 0;  // one page of one layer
  int64_t page_bytes_ = 0;
  int64_t window_page_bytes_ = 0;
  bool has_rings_ = false;  // some stream's pages keep rings (KvStream::ring_horizon)
  std::vector<std::vector<KvStream>> streams_;          // per layer, where the family has streams
  std::vector<std::vector<int64_t>> stream_offsets_;  // their bytes' offsets in memory_
  DeviceBuffer memory_;         // in the backend's memory
  DeviceBuffer window_memory_;  // the window pages
};

}  // namespace ds
