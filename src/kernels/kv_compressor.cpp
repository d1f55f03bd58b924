#include "kernels/kv_compressor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_tiles.h"
#include "kernels/elementwise.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "tensor/quantize.h"

namespace ds {

uint8_t* compressed_row(const KvLayerView& rows, const BlockTableView& table, int64_t ratio, int64_t page_tokens, int64_t b) {
  // In the page of the block's last token: the row depends on the tokens up
  // to it, so a page shared by sequences with a common prefix holds only rows
  // that prefix determines.
  const int64_t token = b * ratio + ratio - 1;
  const int64_t page = table.pages[token / page_tokens], slot = token % page_tokens / ratio;
  return rows.k + size_t((page * rows.page_tokens + slot) * row_bytes(rows.dtype, rows.kv_dim));
}

void kv_compress(ThreadPool& pool, const KvCompressorParams& c, const float* kv, const float* score, int64_t n_tokens,
                 const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                 const BlockTableView* window_tables, int64_t page_tokens, const KvLayerView& state, const KvLayerView& rows) {
  const int64_t w = c.width(), r = c.ratio, dim = c.dim;
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(2 * w));
    for (int64_t t = begin; t < end; ++t) {
      const float* ape = c.ape + positions[t] % r * w;
      std::copy_n(kv + t * w, w, row.data());
      for (int64_t i = 0; i < w; ++i) row[size_t(w + i)] = score[t * w + i] + ape[i];
      kv_write(state, row.data(), nullptr, 1, positions + t, seq_of_token + t, window_tables);
    }
  });
  std::vector<int64_t> completing;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if ((positions[t] + 1) % r == 0) completing.push_back(t);
  }
  pool.parallel_for(int64_t(completing.size()), [&](int64_t begin, int64_t end) {
    std::vector<float> pooled(static_cast<size_t>(2 * r * 2 * w)), out(static_cast<size_t>(dim));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = completing[size_t(i)], b = positions[t] / r;
      // The pooled tokens' state rows: with overlap, block b - 1's (first halves) then block b's (second halves).
      const int64_t first = c.overlap && b > 0 ? (b - 1) * r : b * r, n_rows = b * r + r - first;
      kv_read(state, state.k, window_tables[seq_of_token[t]], 0, first, n_rows, pooled.data());
      for (int64_t e = 0; e < dim; ++e) {
        // Entry j's value and score for channel e.
        const auto entry = [&](int64_t j, bool score_part) {
          const bool current = j >= n_rows - r;
          const int64_t half = c.overlap && current ? dim : 0;
          return pooled[size_t(j * 2 * w + (score_part ? w : 0) + half + e)];
        };
        float max = -INFINITY;
        for (int64_t j = 0; j < n_rows; ++j) max = std::max(max, entry(j, true));
        float sum = 0.0f, acc = 0.0f;
        for (int64_t j = 0; j < n_rows; ++j) {
          const float p = std::exp(entry(j, true) - max);
          sum += p;
          acc += p * entry(j, false);
        }
        out[size_t(e)] = acc / sum;
      }
      rms_norm(out.data(), c.norm, c.eps, 1, dim, out.data());
      const int32_t position = int32_t(b * r);
      rope_strided(c.rope, out.data() + dim - c.rope.n_rot, 1, 1, c.rope.n_rot, dim, dim, &position, position + 1);
      quantize_row(rows.dtype, out.data(), compressed_row(rows, tables[seq_of_token[t]], r, page_tokens, b), dim);
    }
  });
}

}  // namespace ds
