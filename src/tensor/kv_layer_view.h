#pragma once
// How attention reads paged KV memory, in every backend: a layer's pages, a
// sequence's block table, the heads' shape.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// One layer's KV page memory: k and v are [n_pages][n_kv_heads][page_tokens]
// [head_dim] in dtype. Within a page one KV head's positions are contiguous,
// so attention, which reads one KV head at a time, reads whole runs.
// v may be null: then each key row also holds the value, in its first v_dim
// elements (multi-head latent attention in absorbed form: the keys are the
// latent plus a RoPE part, the values the latent).
struct KvLayerView {
  DType dtype = DType::f16;  // f32, f16 or q8_0 (head_dim a multiple of 32)
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int64_t page_tokens = 0;
  int64_t kv_dim = 0;  // n_kv_heads * head_dim
  int64_t n_kv_heads = 1;
  int64_t head_dim() const { return kv_dim / n_kv_heads; }
};

// The pages of one sequence in position order: position p lives in page
// block_table[p / page_tokens] at slot p % page_tokens.
struct BlockTableView {
  const int32_t* pages = nullptr;
  int32_t n_pages = 0;
};

struct AttentionShape {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;  // applied to q·k
  int64_t v_dim = 0;   // value elements per head; 0: head_dim
  int64_t value_dim() const { return v_dim > 0 ? v_dim : head_dim; }
};

}  // namespace ds
