#pragma once
// Hyper-parameters of a decoder model, read from GGUF metadata: the keys every
// family shares here, each family's own in its file (model/families/), which
// also says what one token's KV row holds.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "kernels/moe_route.h"
#include "kernels/rope.h"
#include "model/config_reader.h"
#include "parallel/rank_layout.h"

namespace ds {

struct Family;

// Multi-head latent attention (DeepSeek-V2/V3): keys and values are rebuilt
// per head from a shared compressed latent; only the latent and one shared
// RoPE key per token are cached. All zero in a model without it.
struct MlaConfig {
  int64_t q_lora_rank = 0;   // 0: queries come straight from attn_q (V2-Lite)
  int64_t kv_lora_rank = 0;  // the latent's width
  int64_t qk_nope_dim = 0;   // per-head key/query part without RoPE
  int64_t qk_rope_dim = 0;   // per-head part with RoPE (shared key across heads)
  int64_t v_head_dim = 0;
  float kq_scale = 1.0f;     // 1/sqrt(nope + rope), times the YaRN mscale squared
  int64_t cache_dim() const { return kv_lora_rank + qk_rope_dim; }
};

// DeepSeekMoE: after the leading dense layers, each token's FFN is the sum of
// its top-k routed experts (weighted; the routing is kernels/moe_route.h's)
// plus the always-on shared experts. n_expert 0 in a dense model.
struct MoeConfig : ExpertRouting {
  int64_t n_expert_shared = 0;
  int64_t expert_ff = 0;      // one expert's hidden width
  int64_t shared_ff = 0;      // the shared experts' width together (n_expert_shared x expert_ff; a rank's part under tensor parallel)
  int64_t leading_dense = 0;  // layers before the first MoE layer
  bool is_moe_layer(int64_t layer) const { return n_expert > 0 && layer >= leading_dense; }
};

// DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2): each query
// attends only to the top_k cached positions its scores pick. n_head 0 in a
// model without it.
struct IndexerConfig {
  int64_t n_head = 0;
  int64_t key_dim = 0;  // one key per token, one query per head, this wide
  int64_t top_k = 0;
};

// DeepSeek-V4 (../shared/DEEPSEEK-V32-V4.md section 2.2): hyper-connection
// streams, attention over a raw window plus compressed rows, a grouped
// output LoRA. hc_streams 0 in other models.
struct Deepseek4Config {
  int64_t hc_streams = 0;
  int64_t sinkhorn_iterations = 0;
  float hc_eps = 0.0f;
  int64_t q_lora_rank = 0;
  int64_t window = 0;  // raw positions each query sees, its own included
  int64_t o_groups = 0, o_lora_rank = 0;
  std::vector<int64_t> compress_ratios;  // per layer: 0 (window only), 4 (with the indexer) or 128
  RopeParams compressed_rope;            // the compressing layers' RoPE; c.rope is the window-only layers'
  std::vector<float> expert_limit, shared_limit;  // per layer, the SwiGLU clamps
  int64_t hash_layers = 0;  // the first layers route by token id (ffn_gate_tid2eid)
};

// What one token's KV page slot holds per layer, as the family's attention
// writes it: k_dim elements of keys, then v_dim of values, shared by n_heads
// key heads. latent: the keys are multi-head latent attention's rows, which
// are their own values; v then holds, where v_dim > 0, a second key-only
// stream (the indexer's keys).
// A family whose layers cache different things (DeepSeek-V4) lists instead,
// per layer, its streams: each a key-only array of rows of dim elements, one
// row per tokens_per_row tokens of a page (at least one per page), read by
// KvCache::stream. A windowed stream is read only within `horizon` tokens
// before the newest position (a sliding window's raw rows, a compressor's
// state for the rows it has yet to form): it lives in window pages, which a
// sequence holds only for its last pages (KvCacheManager).
struct KvStream {
  int64_t dim = 0;
  int64_t tokens_per_row = 1;
  // Read by the ops that address rows as positions (a row per page slot,
  // kernels/paged_attention.h's layout): pages must hold whole rows.
  bool position_addressed = false;
  bool windowed = false;
  // A windowed stream whose reader (kernels/kv_compressor.h) reads, of the
  // rows before a step, only the last ring_horizon, and addresses them by
  // position modulo the page's rows: a page keeps a ring of its last
  // ring_horizon + draft_tokens rows (draft tokens: what a step may write
  // past what its sequence keeps, so that a rejected draft never overwrites a
  // row still read), where that is fewer than its tokens. 0: a row per token.
  int64_t ring_horizon = 0;
  int64_t rows_per_page(int64_t page_tokens, int64_t draft_tokens) const {
    if (tokens_per_row >= page_tokens) return 1;
    if (ring_horizon > 0 && ring_horizon + draft_tokens < page_tokens) return ring_horizon + draft_tokens;
    return page_tokens / tokens_per_row;
  }
};

struct KvRowShape {
  int64_t k_dim = 0;
  int64_t v_dim = 0;
  int64_t n_heads = 1;
  bool latent = false;
  std::vector<std::vector<KvStream>> layer_streams;  // empty: every layer is k_dim keys and v_dim values
  // Where some stream is windowed: a step's tokens read its rows back to
  // `horizon` positions before the step's first (0: none is).
  int64_t horizon = 0;
  // The page size these rows fit (--kv-page-tokens' default).
  int64_t page_tokens = 16;
  // Layers after the model's whose rows the pages hold too: the file's
  // multi-token-prediction layer, when it drafts (engine/mtp_drafter.h), so
  // that its rows are paged, shared and preempted with the model's.
  int64_t nextn_layers = 0;
};

struct ModelConfig {
  const Family* family = nullptr;  // the architecture: its name, its layers (model/family.h)
  std::string name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;  // a dense layer's FFN width (feed_forward_length; families without dense layers: 0)
  int64_t n_ctx_train = 0;
  float norm_eps = 1e-5f;
  RopeParams rope;
  KvRowShape kv;
  MlaConfig mla;
  MoeConfig moe;
  IndexerConfig indexer;
  Deepseek4Config v4;
  int64_t n_nextn_layer = 0;  // multi-token-prediction layers the file holds after the n_layer run here
  // The file's block number of layer 0: 0, or n_layer of the model whose
  // multi-token-prediction layer this is (Model::load_nextn).
  int64_t first_block = 0;
  // The part of the model this config describes: with ranks split, the head
  // counts and FFN width are one rank's (split_across).
  RankLayout ranks;
  // Split: whether each rank's KV rows are its heads' part of the row (false
  // where every rank keeps the whole row, as MLA's latent and V4's row).
  bool kv_split = false;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  const char* arch_name() const;
  // "blk.N." of layer `layer` (N counts from first_block).
  std::string block_prefix(int64_t layer) const { return "blk." + std::to_string(first_block + layer) + "."; }
  // Keeps the multi-token-prediction layer's rows in the KV pages
  // (kv.nextn_layers); refused, saying why, for a file that has none to run.
  Status cache_nextn_rows();
  // Makes this config rank `layout.rank`'s part of the model (the family
  // divides what it splits); refused, naming why, where the family does not
  // split or the model's shapes do not divide.
  Status split_across(RankLayout layout);

  static Result<ModelConfig> from_gguf(const GgufFile& file);
};

// The RoPE settings (freq_base, scaling and YaRN's keys) into c.rope, which
// rotates n_rot dimensions of each head (rope.dimension_count where the file
// has it, else `default_n_rot`); at most c.head_dim, even.
Status read_rope(const ConfigReader& reader, int64_t default_n_rot, ModelConfig& c);

}  // namespace ds
