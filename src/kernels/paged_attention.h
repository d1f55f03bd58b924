#pragma once
// Causal attention that reads keys and values only through block tables over
// fixed-size KV pages, with grouped-query heads.

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/dtype.h"
#include "tensor/kv_layer_view.h"

namespace ds {

// Per-thread buffers, so that the hot path does not allocate.
struct AttentionScratch {
  struct PerThread {
    std::vector<float> scores;   // [tokens of a block][heads of an item][positions of a key range]
    std::vector<float> queries;  // their queries, rounded to the cache's type
    std::vector<float> rows;               // a tile of cached keys or values in f32
    std::vector<float> out, max, sum;      // their softmax states over one key range
  };
  std::vector<PerThread> threads;
  std::vector<float> partials;         // the softmax states of each key range, merged at the end
  std::vector<int64_t> block_first;    // each query block's first token, then n_tokens
  std::vector<int64_t> first_unit;     // index of each block's first (item, key range)
  std::vector<int64_t> first_state;    // index of each token's first key-range state
  // Floats of key-range states held at once (16 MiB): a step whose ranges
  // need more runs in waves of whole query blocks, with the same results.
  int64_t partial_floats_limit = int64_t(1) << 22;
};

// Positions [p0, p0 + n) of one sequence's cached rows of KV head kv_head in
// `memory` (kv.k or kv.v) to f32: out [n][head_dim].
void kv_read(const KvLayerView& kv, const uint8_t* memory, const BlockTableView& table, int64_t kv_head, int64_t p0, int64_t n,
             float* out);

// Stores the keys and values of each token at its position:
// k, v: [n_tokens, kv_dim] f32 (v ignored when kv.v is null); token t belongs
// to sequence seq_of_token[t].
void kv_write(const KvLayerView& kv, const float* k, const float* v, int64_t n_tokens, const int32_t* positions,
              const int32_t* seq_of_token, const BlockTableView* tables);

// out[t, h, :] = softmax(q[t,h]·K[0..pos_t] * scale) · V[0..pos_t] over the
// token's own sequence. The heads that share a KV head (up to eight at a
// time), of up to four consecutive tokens of one sequence (a prefill chunk),
// go through the cache together: each cached row is converted to f32 once for
// all of them (kernels/attention_tiles.h). Long contexts are split into key
// ranges of 512 positions that threads take separately, their partial softmax
// states merged in order (split-K). A token's result is the same whatever
// shares its step. q: [n_tokens, n_head, head_dim]; out: [n_tokens, n_head,
// value_dim].
void paged_attention(ThreadPool& pool, const KvLayerView& kv, const AttentionShape& shape, const float* q,
                     int64_t n_tokens, const int32_t* positions, const int32_t* seq_of_token,
                     const BlockTableView* tables, float* out, AttentionScratch& scratch);

// The plain reference: gathers each sequence's keys and values to f32 first.
void paged_attention_reference(const KvLayerView& kv, const AttentionShape& shape, const float* q, int64_t n_tokens,
                               const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                               float* out);

}  // namespace ds
