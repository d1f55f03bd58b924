#pragma once
// DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer picks, for
// each query token, the top_k cached positions of its sequence, and attention
// runs over those positions only, gathered: past top_k cached tokens its cost
// grows with top_k, not with the context (llama.cpp masks a dense attention
// instead). ../shared/DEEPSEEK-V32-V4.md section 2.1 has the math.

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/kv_layer_view.h"

namespace ds {

// Per-thread buffers, so that the hot path does not allocate.
struct SparseAttentionScratch {
  struct PerThread {
    std::vector<float> rows;     // gathered cached rows in f32
    std::vector<float> queries;  // queries rounded to the cache's type
    std::vector<float> values;   // their first value_dim elements, side by side
    std::vector<float> scores;   // one per position
    std::vector<float> head_scores;  // per head, a tile of positions' products
    std::vector<int32_t> order;  // positions being ranked
    std::vector<float> max, sum;  // per head, its online softmax so far
  };
  std::vector<PerThread> threads;
  // One token's queries, scores and ranking when its positions are split across the threads.
  std::vector<float> queries, scores;
  std::vector<int32_t> order;
};

// The indexer's choice. For each token t: score(s) = sum over heads h of
// weights[t * n_heads + h] * weight_scale * relu(q[t, h] · key[s]) for every cached position
// s <= positions[t] of its sequence (keys: a key-only view, one row of
// keys.kv_dim per position; q: [n_tokens, n_heads, keys.kv_dim]); then the
// top_k positions by score, ties going to the lower position, written in
// ascending order to selected[t * top_k ...], their count to n_selected[t]. A
// token with at most top_k positions takes them all without scoring. With
// fewer tokens than threads (decode), each token's positions are scored by all
// the threads, a tile each: its choice is the same bits either way. Queries
// are rounded to the cache's type before their products, in both ops, as the
// dense attention rounds them (kernels/paged_attention.h).
void indexer_select(ThreadPool& pool, const KvLayerView& keys, const float* q, int64_t n_heads, const float* weights, float weight_scale,
                    int64_t n_tokens, const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                    int64_t top_k, int32_t* selected, int32_t* n_selected, SparseAttentionScratch& scratch);

// Attention over the selected positions of one KV head: out[t, h, :] =
// softmax over s in selected(t) of (q[t, h] · K[s] * scale), times V[s],
// where K[s] is the cached row (shape.head_dim wide, kv.kv_dim) and V[s] its
// first shape.value_dim() elements (a latent cache, whose rows are keys and
// values at once). Sums run over the positions in ascending order, so taking
// every position gives dense causal attention. q: [n_tokens, n_head, head_dim];
// out: [n_tokens, n_head, value_dim].
void sparse_attention(ThreadPool& pool, const KvLayerView& kv, const AttentionShape& shape, const float* q, int64_t n_tokens,
                      const int32_t* seq_of_token, const BlockTableView* tables, const int32_t* selected,
                      const int32_t* n_selected, int64_t top_k, float* out, SparseAttentionScratch& scratch);

// The plain references, in double: the tests' oracle.
void indexer_select_reference(const KvLayerView& keys, const float* q, int64_t n_heads, const float* weights, float weight_scale, int64_t n_tokens,
                              const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                              int64_t top_k, int32_t* selected, int32_t* n_selected);
void sparse_attention_reference(const KvLayerView& kv, const AttentionShape& shape, const float* q, int64_t n_tokens,
                                const int32_t* seq_of_token, const BlockTableView* tables, const int32_t* selected,
                                const int32_t* n_selected, int64_t top_k, float* out);

}  // namespace ds
