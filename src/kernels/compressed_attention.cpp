#include "kernels/compressed_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_tiles.h"
#include "kernels/kv_compressor.h"
#include "kernels/paged_attention.h"

namespace ds {

void compressed_attention(ThreadPool& pool, const CompressedAttentionParams& a, const float* q, int64_t n_tokens, const int32_t* positions,
                          const int32_t* seq_of_token, const BlockTableView* tables, const BlockTableView* window_tables,
                          int64_t page_tokens, const KvLayerView& window, const KvLayerView& rows, const int32_t* selected,
                          const int32_t* n_selected, float* out) {
  const AttentionTileKernels& tiles = attention_tile_kernels();
  const int64_t hd = a.head_dim;
  // Units of (token, share of its heads), enough for every thread in a decode
  // step; a head's result does not depend on which share it is in.
  const int64_t shares = std::clamp<int64_t>((2 * pool.n_threads() + n_tokens - 1) / n_tokens, 1, a.n_head);
  const int64_t heads_per_share = (a.n_head + shares - 1) / shares;
  pool.parallel_for_dynamic(n_tokens * shares, 1, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> keys, queries, scores, sums;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t t = unit / shares, h0 = unit % shares * heads_per_share, n_q = std::min(heads_per_share, a.n_head - h0);
      if (n_q <= 0) continue;
      const BlockTableView& table = tables[seq_of_token[t]];
      // The token's keys: its window's raw rows in position order, then the compressed rows in index order.
      const int64_t p = positions[t], first = std::max<int64_t>(0, p - a.window + 1), n_window = p + 1 - first;
      const int64_t n_rows = a.ratio == 0 ? 0 : selected ? n_selected[t] : (p + 1) / a.ratio, n_keys = n_window + n_rows;
      keys.resize(size_t(n_keys * hd));
      kv_read(window, window.k, window_tables[seq_of_token[t]], 0, first, n_window, keys.data());
      for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t b = selected ? selected[t * a.top_k + i] : i;
        tiles.to_f32(rows.dtype, compressed_row(rows, table, a.ratio, page_tokens, b), keys.data() + (n_window + i) * hd, hd);
      }
      // Queries rounded to the cache's type, as the other attentions do (kernels/paged_attention.h).
      queries.resize(size_t(n_q * hd));
      tiles.round_to_cache(window.dtype, q + (t * a.n_head + h0) * hd, queries.data(), n_q * hd);
      scores.resize(size_t(n_q * n_keys));
      tiles.scores(hd, queries.data(), n_q, keys.data(), n_keys, a.scale, scores.data(), n_keys);
      sums.resize(size_t(n_q));
      for (int64_t i = 0; i < n_q; ++i) {  // softmax with the head's sink in the denominator
        float* row = scores.data() + i * n_keys;
        const float sink = a.sinks[h0 + i];
        float max = sink;
        for (int64_t k = 0; k < n_keys; ++k) max = std::max(max, row[k]);
        float sum = std::exp(sink - max);
        for (int64_t k = 0; k < n_keys; ++k) sum += row[k] = std::exp(row[k] - max);
        sums[size_t(i)] = sum;
      }
      float* o = out + (t * a.n_head + h0) * hd;
      std::fill(o, o + n_q * hd, 0.0f);
      tiles.weighted_sum(hd, scores.data(), n_keys, n_q, keys.data(), n_keys, o);
      for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t e = 0; e < hd; ++e) o[i * hd + e] /= sums[size_t(i)];
      }
    }
  });
}

}  // namespace ds
