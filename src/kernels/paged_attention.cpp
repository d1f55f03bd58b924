#include "kernels/paged_attention.h"

#include <cmath>
#include <cstring>

#include "base/status.h"
#include "kernels/axpy.h"
#include "kernels/elementwise.h"
#include "kernels/vec_dot.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// Bytes of the first `n` elements of a token's keys or values: an offset into
// a slot (whole q8_0 blocks, since heads are multiples of the block size).
size_t kv_bytes(const KvLayerView& kv, int64_t n) { return size_t(row_bytes(kv.dtype, n)); }

// Byte offset of (position, kv element 0) in a layer's K or V memory.
size_t slot_offset(const KvLayerView& kv, const BlockTableView& table, int64_t position) {
  const int64_t page_index = position / kv.page_tokens;
  DS_CHECK(page_index < table.n_pages, "position beyond the sequence's block table");
  const int64_t slot = int64_t(table.pages[page_index]) * kv.page_tokens + position % kv.page_tokens;
  return size_t(slot) * kv_bytes(kv, kv.kv_dim);
}

}  // namespace

void kv_write(const KvLayerView& kv, const float* k, const float* v, int64_t n_tokens, const int32_t* positions,
              const int32_t* seq_of_token, const BlockTableView* tables) {
  DS_CHECK(kv.dtype == DType::f32 || kv.dtype == DType::f16 || kv.dtype == DType::q8_0, "KV dtype must be f32, f16 or q8_0");
  for (int64_t t = 0; t < n_tokens; ++t) {
    const size_t offset = slot_offset(kv, tables[seq_of_token[t]], positions[t]);
    quantize_row(kv.dtype, k + t * kv.kv_dim, kv.k + offset, kv.kv_dim);
    if (kv.v) quantize_row(kv.dtype, v + t * kv.kv_dim, kv.v + offset, kv.kv_dim);
  }
}

void paged_attention(ThreadPool& pool, const KvLayerView& kv, const AttentionShape& shape, const float* q,
                     int64_t n_tokens, const int32_t* positions, const int32_t* seq_of_token,
                     const BlockTableView* tables, float* out, AttentionScratch& scratch) {
  const int64_t head_dim = shape.head_dim, v_dim = shape.value_dim();
  const int64_t group = shape.n_head / shape.n_head_kv;
  const size_t head_offset_per_kv_head = kv_bytes(kv, head_dim);
  const uint8_t* values = kv.v ? kv.v : kv.k;
  // Queries are rounded to the cache's type before q·k, as llama.cpp does, so
  // that both engines see the same products.
  const VecDotFn dot = vec_dot_kernel(kv.dtype).dot;
  const AxpyFn axpy = axpy_kernel(kv.dtype);
  int64_t max_len = 0;
  for (int64_t t = 0; t < n_tokens; ++t) max_len = std::max<int64_t>(max_len, positions[t] + 1);
  const int n_threads = pool.n_threads();
  if (int(scratch.scores.size()) < n_threads) scratch.scores.resize(static_cast<size_t>(n_threads));
  if (int(scratch.q_converted.size()) < n_threads) scratch.q_converted.resize(static_cast<size_t>(n_threads));
  for (int i = 0; i < n_threads; ++i) {
    if (int64_t(scratch.scores[i].size()) < max_len) scratch.scores[i].resize(static_cast<size_t>(max_len));
    if (int64_t(scratch.q_converted[i].size()) < head_dim * 2) scratch.q_converted[i].resize(size_t(head_dim * 2));
  }

  // Later tokens attend to more positions: items are handed out dynamically.
  pool.parallel_for_dynamic(n_tokens * shape.n_head, shape.n_head, [&](int64_t begin, int64_t end, int thread_index) {
    float* scores = scratch.scores[size_t(thread_index)].data();
    void* q_typed = scratch.q_converted[size_t(thread_index)].data();
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / shape.n_head, h = item % shape.n_head;
      const int64_t kv_head = h / group;
      const BlockTableView& table = tables[seq_of_token[t]];
      const int64_t n_ctx = positions[t] + 1;
      const float* q_head = q + (t * shape.n_head + h) * head_dim;
      quantize_row(kv.dtype, q_head, q_typed, head_dim);
      for (int64_t p = 0; p < n_ctx; ++p) {
        const uint8_t* key = kv.k + slot_offset(kv, table, p) + size_t(kv_head) * head_offset_per_kv_head;
        scores[p] = dot(head_dim, key, q_typed) * shape.scale;
      }
      softmax(scores, n_ctx);
      float* o = out + (t * shape.n_head + h) * v_dim;
      std::memset(o, 0, size_t(v_dim) * sizeof(float));
      for (int64_t p = 0; p < n_ctx; ++p) {
        const uint8_t* value = values + slot_offset(kv, table, p) + size_t(kv_head) * head_offset_per_kv_head;
        axpy(v_dim, scores[p], value, o);
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
        const size_t offset = slot_offset(kv, table, p) + kv_bytes(kv, kv_head * head_dim);
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
        const size_t offset = slot_offset(kv, table, p) + kv_bytes(kv, kv_head * head_dim);
        dequantize_row(kv.dtype, values + offset, value.data(), v_dim);
        for (int64_t d = 0; d < v_dim; ++d) o[d] += scores[p] / sum * value[d];
      }
      for (int64_t d = 0; d < v_dim; ++d) out[(t * shape.n_head + h) * v_dim + d] = float(o[d]);
    }
  }
}

}  // namespace ds
