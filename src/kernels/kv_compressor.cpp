#include "kernels/kv_compressor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status.h"
#include "kernels/elementwise.h"
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

namespace {

// Where the state row of `position` is: in the window page of the position,
// at slot position % (the rows the stream keeps per page).
uint8_t* state_row(const KvLayerView& state, const BlockTableView& table, int64_t page_tokens, int64_t position) {
  const int64_t page = table.pages[position / page_tokens], slot = position % state.page_tokens;
  return state.k + size_t((page * state.page_tokens + slot) * row_bytes(state.dtype, state.kv_dim));
}

}  // namespace

void kv_compress(ThreadPool& pool, const KvCompressorParams& c, const float* kv, const float* score, int64_t n_tokens,
                 const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                 const BlockTableView* window_tables, int64_t page_tokens, const KvLayerView& state, const KvLayerView& rows) {
  const int64_t w = c.width(), r = c.ratio, dim = c.dim, ring = state.page_tokens;
  const size_t state_bytes = size_t(row_bytes(state.dtype, 2 * w));
  // Each token's sequence's first and last position in the step.
  std::vector<int32_t> first_in_step(static_cast<size_t>(n_tokens)), last_in_step(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const bool continues = t > 0 && seq_of_token[t - 1] == seq_of_token[t];
    DS_CHECK(!continues || positions[t] == positions[t - 1] + 1, "a sequence's tokens in a step must be consecutive positions");
    first_in_step[size_t(t)] = continues ? first_in_step[size_t(t - 1)] : positions[t];
  }
  for (int64_t t = n_tokens - 1; t >= 0; --t) {
    const bool continued = t + 1 < n_tokens && seq_of_token[t + 1] == seq_of_token[t];
    last_in_step[size_t(t)] = continued ? last_in_step[size_t(t + 1)] : positions[t];
  }
  // The step's state rows as the KV type stores them: the rows formed read
  // them from here, the earlier ones from the ring, which takes the step's
  // only once every row is formed (its slots held rows read before them).
  // (The caller's thread's buffers, reused across calls: the workers see them through these pointers.)
  thread_local std::vector<float> step_state_buffer;
  thread_local std::vector<uint8_t> step_stored_buffer;
  step_state_buffer.resize(size_t(n_tokens * 2 * w));
  step_stored_buffer.resize(size_t(n_tokens) * state_bytes);
  float* const step_state = step_state_buffer.data();
  uint8_t* const step_stored = step_stored_buffer.data();
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(2 * w));
    for (int64_t t = begin; t < end; ++t) {
      const float* ape = c.ape + positions[t] % r * w;
      std::copy_n(kv + t * w, w, row.data());
      for (int64_t i = 0; i < w; ++i) row[size_t(w + i)] = score[t * w + i] + ape[i];
      quantize_row(state.dtype, row.data(), step_stored + size_t(t) * state_bytes, 2 * w);
      dequantize_row(state.dtype, step_stored + size_t(t) * state_bytes, step_state + t * 2 * w, 2 * w);
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
      for (int64_t j = 0; j < n_rows; ++j) {
        const int64_t q = first + j;
        float* entry_row = pooled.data() + j * 2 * w;
        if (q >= first_in_step[size_t(t)]) {
          std::copy_n(step_state + (t - (positions[t] - q)) * 2 * w, 2 * w, entry_row);
        } else {
          dequantize_row(state.dtype, state_row(state, window_tables[seq_of_token[t]], page_tokens, q), entry_row, 2 * w);
        }
      }
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
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      // Stored unless a later token of the step takes its slot in the same page.
      const int64_t p = positions[t];
      const int64_t last_in_page = std::min<int64_t>(last_in_step[size_t(t)], (p / page_tokens + 1) * page_tokens - 1);
      if (p + ring <= last_in_page) continue;
      std::copy_n(step_stored + size_t(t) * state_bytes, state_bytes, state_row(state, window_tables[seq_of_token[t]], page_tokens, p));
    }
  });
}

}  // namespace ds
