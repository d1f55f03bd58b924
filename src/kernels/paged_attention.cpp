#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status.h"
#include "kernels/attention_tiles.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// Bytes of n cached elements (whole q8_0 blocks: heads are multiples of the
// block size).
size_t kv_bytes(const KvLayerView& kv, int64_t n) { return size_t(row_bytes(kv.dtype, n)); }

// Heads of one KV head's group that share a pass over the cache, and cached
// positions converted to f32 at a time (a tile of rows stays in L1/L2).
constexpr int64_t k_heads_per_item = 8;
constexpr int64_t k_position_tile = 16;

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

// Byte offset of (position, kv_head) in a layer's K or V memory.
size_t slot_offset(const KvLayerView& kv, const BlockTableView& table, int64_t position, int64_t kv_head) {
  const int64_t page_index = position / kv.page_tokens;
  DS_CHECK(page_index < table.n_pages, "position beyond the sequence's block table");
  const size_t head_bytes = kv_bytes(kv, kv.head_dim());
  const size_t page = size_t(table.pages[page_index]) * size_t(kv.n_kv_heads) + size_t(kv_head);
  return (page * size_t(kv.page_tokens) + size_t(position % kv.page_tokens)) * head_bytes;
}

}  // namespace

void kv_read(const KvLayerView& kv, const uint8_t* memory, const BlockTableView& table, int64_t kv_head, int64_t p0, int64_t n,
             float* out) {
  const AttentionTileKernels& tiles = attention_tile_kernels();
  const int64_t head_dim = kv.head_dim();
  for (int64_t j = 0; j < n;) {  // a page's positions of one head are contiguous: one call per page
    const int64_t run = std::min(n - j, kv.page_tokens - (p0 + j) % kv.page_tokens);
    tiles.to_f32(kv.dtype, memory + slot_offset(kv, table, p0 + j, kv_head), out + j * head_dim, run * head_dim);
    j += run;
  }
}

void kv_write(const KvLayerView& kv, const float* k, const float* v, int64_t n_tokens, const int32_t* positions,
              const int32_t* seq_of_token, const BlockTableView* tables) {
  DS_CHECK(kv.dtype == DType::f32 || kv.dtype == DType::f16 || kv.dtype == DType::q8_0, "KV dtype must be f32, f16 or q8_0");
  const int64_t head_dim = kv.head_dim();
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < kv.n_kv_heads; ++h) {
      const size_t offset = slot_offset(kv, tables[seq_of_token[t]], positions[t], h);
      quantize_row(kv.dtype, k + t * kv.kv_dim + h * head_dim, kv.k + offset, head_dim);
      if (kv.v) quantize_row(kv.dtype, v + t * kv.kv_dim + h * head_dim, kv.v + offset, head_dim);
    }
  }
}

void paged_attention(ThreadPool& pool, const KvLayerView& kv, const AttentionShape& shape, const float* q,
                     int64_t n_tokens, const int32_t* positions, const int32_t* seq_of_token,
                     const BlockTableView* tables, float* out, AttentionScratch& scratch) {
  const int64_t head_dim = shape.head_dim, v_dim = shape.value_dim();
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t head_blocks = (group + k_heads_per_item - 1) / k_heads_per_item;
  DS_CHECK(kv.head_dim() == head_dim && kv.n_kv_heads == shape.n_head_kv, "KV layout and attention shape differ");
  const uint8_t* values = kv.v ? kv.v : kv.k;
  const AttentionTileKernels& tiles = attention_tile_kernels();
  int64_t max_len = 0;
  for (int64_t t = 0; t < n_tokens; ++t) max_len = std::max<int64_t>(max_len, positions[t] + 1);
  const int n_threads = pool.n_threads();
  if (int(scratch.threads.size()) < n_threads) scratch.threads.resize(static_cast<size_t>(n_threads));
  for (AttentionScratch::PerThread& buffers : scratch.threads) {
    grow(buffers.scores, k_heads_per_item * max_len);
    grow(buffers.queries, k_heads_per_item * head_dim);
    grow(buffers.rounded_query, row_bytes(kv.dtype, head_dim));
    grow(buffers.rows, k_position_tile * std::max(head_dim, v_dim));
  }

  // An item is up to k_heads_per_item heads of one KV head's group for one
  // token. Later tokens attend to more positions: items are handed out
  // dynamically.
  const int64_t n_items = n_tokens * shape.n_head_kv * head_blocks;
  pool.parallel_for_dynamic(n_items, 1, [&](int64_t begin, int64_t end, int thread_index) {
    AttentionScratch::PerThread& buffers = scratch.threads[size_t(thread_index)];
    float* scores = buffers.scores.data();
    float* queries = buffers.queries.data();
    float* rows = buffers.rows.data();
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / (shape.n_head_kv * head_blocks);
      const int64_t kv_head = item / head_blocks % shape.n_head_kv;
      const int64_t first_head = kv_head * group + item % head_blocks * k_heads_per_item;
      const int64_t n_heads = std::min(k_heads_per_item, (kv_head + 1) * group - first_head);
      const BlockTableView& table = tables[seq_of_token[t]];
      const int64_t n_ctx = positions[t] + 1;
      // Queries are rounded to the cache's type before q·k, as llama.cpp
      // does, so that both engines see the same products.
      for (int64_t i = 0; i < n_heads; ++i) {
        quantize_row(kv.dtype, q + (t * shape.n_head + first_head + i) * head_dim, buffers.rounded_query.data(), head_dim);
        dequantize_row(kv.dtype, buffers.rounded_query.data(), queries + i * head_dim, head_dim);
      }
      // Cached rows p0.. in f32: whole rows a page at a time, or one by one
      // when only the first dim elements of each row are wanted.
      const auto cached_rows = [&](const uint8_t* base, int64_t p0, int64_t n_positions, int64_t dim) {
        if (dim == head_dim) return kv_read(kv, base, table, kv_head, p0, n_positions, rows);
        for (int64_t j = 0; j < n_positions; ++j) {
          tiles.to_f32(kv.dtype, base + slot_offset(kv, table, p0 + j, kv_head), rows + j * dim, dim);
        }
      };
      for (int64_t p0 = 0; p0 < n_ctx; p0 += k_position_tile) {
        const int64_t n_positions = std::min(k_position_tile, n_ctx - p0);
        cached_rows(kv.k, p0, n_positions, head_dim);
        tiles.scores(head_dim, queries, n_heads, rows, n_positions, shape.scale, scores + p0, max_len);
      }
      for (int64_t i = 0; i < n_heads; ++i) tiles.softmax(scores + i * max_len, n_ctx);
      float* o = out + (t * shape.n_head + first_head) * v_dim;
      std::memset(o, 0, size_t(n_heads * v_dim) * sizeof(float));
      for (int64_t p0 = 0; p0 < n_ctx; p0 += k_position_tile) {
        const int64_t n_positions = std::min(k_position_tile, n_ctx - p0);
        cached_rows(values, p0, n_positions, v_dim);
        tiles.weighted_sum(v_dim, scores + p0, max_len, n_heads, rows, n_positions, o);
      }
    }
  });
}

void paged_attention_reference(const KvLayerView& kv, const AttentionShape& shape, const float* q, int64_t n_tokens,
                               const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                               float* out) {
  const int64_t head_dim = shape.head_dim, v_dim = shape.value_dim();
  const int64_t group = shape.n_head / shape.n_head_kv;
  const uint8_t* values = kv.v ? kv.v : kv.k;
  std::vector<float> key(static_cast<size_t>(head_dim)), value(static_cast<size_t>(head_dim)), q_rounded(static_cast<size_t>(head_dim));
  std::vector<uint16_t> q_typed(size_t(head_dim * 2));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < shape.n_head; ++h) {
      const int64_t kv_head = h / group;
      const BlockTableView& table = tables[seq_of_token[t]];
      const int64_t n_ctx = positions[t] + 1;
      quantize_row(kv.dtype, q + (t * shape.n_head + h) * head_dim, q_typed.data(), head_dim);
      dequantize_row(kv.dtype, q_typed.data(), q_rounded.data(), head_dim);
      std::vector<double> scores(static_cast<size_t>(n_ctx));
      double max = -INFINITY;
      for (int64_t p = 0; p < n_ctx; ++p) {
        const size_t offset = slot_offset(kv, table, p, kv_head);
        dequantize_row(kv.dtype, kv.k + offset, key.data(), head_dim);
        double s = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) s += double(q_rounded[d]) * key[d];
        scores[p] = s * shape.scale;
        max = std::max(max, scores[p]);
      }
      double sum = 0.0;
      for (double& s : scores) sum += (s = std::exp(s - max));
      std::vector<double> o(size_t(v_dim), 0.0);
      for (int64_t p = 0; p < n_ctx; ++p) {
        const size_t offset = slot_offset(kv, table, p, kv_head);
        dequantize_row(kv.dtype, values + offset, value.data(), v_dim);
        for (int64_t d = 0; d < v_dim; ++d) o[d] += scores[p] / sum * value[d];
      }
      for (int64_t d = 0; d < v_dim; ++d) out[(t * shape.n_head + h) * v_dim + d] = float(o[d]);
    }
  }
}

}  // namespace ds
