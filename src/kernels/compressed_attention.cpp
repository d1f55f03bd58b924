#include "kernels/compressed_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_tiles.h"
#include "kernels/kv_compressor.h"
#include "kernels/paged_attention.h"

namespace ds {

void compressed_attention(ThreadPool& pool, const CompressedAttentionParams& a, const float* q, int64_t n_tokens, const int32_t* positions,
                          const int32_t* seq_of_token, const BlockTableView* tables, int64_t page_tokens, const KvLayerView& window,
                          const KvLayerView& rows, const int32_t* selected, const int32_t* n_selected, float* out) {
  const AttentionTileKernels& tiles = attention_tile_kernels();
  const int64_t hd = a.head_dim;
  pool.parallel_for_dynamic(n_tokens, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<float> keys, query(static_cast<size_t>(hd)), scores;
    for (int64_t t = begin; t < end; ++t) {
      const BlockTableView& table = tables[seq_of_token[t]];
      const int64_t p = positions[t], first = std::max<int64_t>(0, p - a.window + 1), n_window = p + 1 - first;
      int64_t n_rows = 0;
      if (a.ratio > 0) n_rows = selected ? n_selected[t] : (p + 1) / a.ratio;
      keys.resize(size_t((n_window + n_rows) * hd));
      kv_read(window, window.k, table, 0, first, n_window, keys.data());
      for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t b = selected ? selected[t * a.top_k + i] : i;
        tiles.to_f32(rows.dtype, compressed_row(rows, table, a.ratio, page_tokens, b), keys.data() + (n_window + i) * hd, hd);
      }
      const int64_t n_keys = n_window + n_rows;
      scores.resize(size_t(n_keys));
      for (int64_t h = 0; h < a.n_head; ++h) {
        // Queries rounded to the cache's type, as the other attentions do (kernels/paged_attention.h).
        tiles.round_to_cache(window.dtype, q + (t * a.n_head + h) * hd, query.data(), hd);
        float max = a.sinks[h];
        for (int64_t k = 0; k < n_keys; ++k) {
          const float* key = keys.data() + k * hd;
          float dot = 0.0f;
          for (int64_t e = 0; e < hd; ++e) dot += query[size_t(e)] * key[e];
          scores[size_t(k)] = dot * a.scale;
          max = std::max(max, scores[size_t(k)]);
        }
        float sum = std::exp(a.sinks[h] - max);
        float* o = out + (t * a.n_head + h) * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t k = 0; k < n_keys; ++k) {
          const float w = std::exp(scores[size_t(k)] - max);
          sum += w;
          const float* key = keys.data() + k * hd;
          for (int64_t e = 0; e < hd; ++e) o[e] += w * key[e];
        }
        for (int64_t e = 0; e < hd; ++e) o[e] /= sum;
      }
    }
  });
}

}  // namespace ds
