#include "kernels/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/status.h"
#include "kernels/attention_tiles.h"
#include "kernels/paged_attention.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// The selected rows of one sequence in f32, [n][kv.kv_dim]: runs of
// consecutive positions read at once.
void gather_selected(const KvLayerView& kv, const BlockTableView& table, const int32_t* positions, int64_t n, float* rows) {
  for (int64_t i = 0; i < n;) {
    int64_t run = 1;
    while (i + run < n && positions[i + run] == positions[i] + run) ++run;
    kv_read(kv, kv.k, table, 0, positions[i], run, rows + i * kv.kv_dim);
    i += run;
  }
}

// Positions 0..n-1 ranked by score, the k best (ties: the lower position) in ascending order.
void top_k_ascending(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& order, int32_t* out) {
  order.resize(size_t(n));
  std::iota(order.begin(), order.end(), 0);
  const auto better = [scores](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), better);
  std::sort(order.begin(), order.begin() + k);
  std::copy(order.begin(), order.begin() + k, out);
}

// x rounded to the cache's type, as the dense attention rounds its queries
// (kernels/paged_attention.h) and llama.cpp multiplies them with the cached rows.
void round_like_reference(DType type, const float* x, int64_t n, float* out) {
  std::vector<uint8_t> typed(size_t(row_bytes(type, n)));
  quantize_row(type, x, typed.data(), n);
  dequantize_row(type, typed.data(), out, n);
}

// Cached keys the indexer reads at once.
constexpr int64_t k_position_tile = 256;
// Chosen rows attention reads at once: with their values, in a core's L2 at MLA's widths.
constexpr int64_t k_attention_tile = 128;

}  // namespace

namespace {

// Token t's indexer scores of its positions [p_begin, p_end) into
// scores[p_begin...], a tile of cached keys at a time: every head's products
// with the tile, then each position's score summed over the heads in order.
// A position's score is the same bits whichever call computes it.
void score_positions(const KvLayerView& keys, const BlockTableView& table, const float* queries, int64_t n_heads,
                     const float* head_weights, float weight_scale, int64_t p_begin, int64_t p_end,
                     SparseAttentionScratch::PerThread& s, float* scores) {
  const AttentionTileKernels& tiles = attention_tile_kernels();
  const int64_t dim = keys.kv_dim;
  s.rows.resize(size_t(k_position_tile * dim));
  s.head_scores.resize(size_t(n_heads * k_position_tile));
  for (int64_t p0 = p_begin; p0 < p_end; p0 += k_position_tile) {
    const int64_t n = std::min(k_position_tile, p_end - p0);
    kv_read(keys, keys.k, table, 0, p0, n, s.rows.data());
    tiles.scores(dim, queries, n_heads, s.rows.data(), n, 1.0f, s.head_scores.data(), k_position_tile);
    std::fill(scores + p0, scores + p0 + n, 0.0f);
    for (int64_t h = 0; h < n_heads; ++h) {
      const float w = head_weights[h] * weight_scale;
      const float* products = s.head_scores.data() + h * k_position_tile;
      for (int64_t j = 0; j < n; ++j) scores[p0 + j] += w * std::max(0.0f, products[j]);
    }
  }
}

}  // namespace

void indexer_select(ThreadPool& pool, const KvLayerView& keys, const float* q, int64_t n_heads, const float* weights, float weight_scale,
                    int64_t n_tokens, const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                    int64_t top_k, int32_t* selected, int32_t* n_selected, SparseAttentionScratch& scratch) {
  scratch.threads.resize(size_t(pool.n_threads()));
  const AttentionTileKernels& tiles = attention_tile_kernels();
  const int64_t dim = keys.kv_dim;
  // A token with at most top_k positions takes them all; its queries, rounded.
  const auto takes_all = [&](int64_t t) {
    const int64_t n_ctx = int64_t(positions[t]) + 1;
    if (n_ctx > top_k) return false;
    std::iota(selected + t * top_k, selected + t * top_k + n_ctx, 0);
    n_selected[t] = int32_t(n_ctx);
    return true;
  };
  const auto rounded_queries = [&](int64_t t, std::vector<float>& out) {
    out.resize(size_t(n_heads * dim));
    tiles.round_to_cache(keys.dtype, q + t * n_heads * dim, out.data(), n_heads * dim);
  };
  if (n_tokens >= pool.n_threads()) {  // a token per thread at a time
    pool.parallel_for_dynamic(n_tokens, 1, [&](int64_t begin, int64_t end, int thread) {
      SparseAttentionScratch::PerThread& s = scratch.threads[size_t(thread)];
      for (int64_t t = begin; t < end; ++t) {
        if (takes_all(t)) continue;
        const int64_t n_ctx = int64_t(positions[t]) + 1;
        rounded_queries(t, s.queries);
        s.scores.resize(size_t(n_ctx));
        score_positions(keys, tables[seq_of_token[t]], s.queries.data(), n_heads, weights + t * n_heads, weight_scale, 0, n_ctx, s,
                        s.scores.data());
        top_k_ascending(s.scores.data(), n_ctx, top_k, s.order, selected + t * top_k);
        n_selected[t] = int32_t(top_k);
      }
    });
    return;
  }
  // Fewer tokens than threads (decode): each token's positions split across the threads.
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (takes_all(t)) continue;
    const int64_t n_ctx = int64_t(positions[t]) + 1, n_tiles = (n_ctx + k_position_tile - 1) / k_position_tile;
    rounded_queries(t, scratch.queries);
    scratch.scores.resize(size_t(n_ctx));
    pool.parallel_for_dynamic(n_tiles, 1, [&](int64_t begin, int64_t end, int thread) {
      score_positions(keys, tables[seq_of_token[t]], scratch.queries.data(), n_heads, weights + t * n_heads, weight_scale,
                      begin * k_position_tile, std::min(n_ctx, end * k_position_tile), scratch.threads[size_t(thread)],
                      scratch.scores.data());
    });
    top_k_ascending(scratch.scores.data(), n_ctx, top_k, scratch.order, selected + t * top_k);
    n_selected[t] = int32_t(top_k);
  }
}

void sparse_attention(ThreadPool& pool, const KvLayerView& kv, const AttentionShape& shape, const float* q, int64_t n_tokens,
                      const int32_t* seq_of_token, const BlockTableView* tables, const int32_t* selected,
                      const int32_t* n_selected, int64_t top_k, float* out, SparseAttentionScratch& scratch) {
  DS_CHECK(kv.n_kv_heads == 1 && kv.kv_dim == shape.head_dim, "sparse_attention: one KV head of the queries' width");
  scratch.threads.resize(size_t(pool.n_threads()));
  const AttentionTileKernels& tiles = attention_tile_kernels();
  const int64_t dim = shape.head_dim, v_dim = shape.value_dim();
  // A unit is one token's heads, or with fewer tokens than threads (decode) a
  // share of them: it passes over the token's chosen rows a tile at a time
  // (online softmax), every head of the unit against each tile while it is in
  // cache, so the rows come from memory once per unit, not once per head. A
  // head's sums depend on its own scores and the fixed tiles only: the same
  // bits whichever heads share its unit.
  const int64_t shares = n_tokens >= pool.n_threads() ? 1 : (pool.n_threads() + n_tokens - 1) / n_tokens;
  const int64_t heads_per_unit = (shape.n_head + shares - 1) / shares;
  pool.parallel_for_dynamic(n_tokens * shares, 1, [&](int64_t begin, int64_t end, int thread) {
    SparseAttentionScratch::PerThread& s = scratch.threads[size_t(thread)];
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t t = unit / shares, h_begin = (unit % shares) * heads_per_unit;
      const int64_t n_q = std::min(heads_per_unit, shape.n_head - h_begin), n = n_selected[t];
      if (n_q <= 0) continue;
      s.queries.resize(size_t(n_q * dim));
      tiles.round_to_cache(kv.dtype, q + (t * shape.n_head + h_begin) * dim, s.queries.data(), n_q * dim);
      s.rows.resize(size_t(k_attention_tile * dim));
      if (v_dim < dim) s.values.resize(size_t(k_attention_tile * v_dim));
      s.head_scores.resize(size_t(n_q * k_attention_tile));
      s.max.assign(size_t(n_q), -INFINITY);
      s.sum.assign(size_t(n_q), 0.0f);
      float* o = out + (t * shape.n_head + h_begin) * v_dim;
      std::fill(o, o + n_q * v_dim, 0.0f);
      for (int64_t p0 = 0; p0 < n; p0 += k_attention_tile) {
        const int64_t m = std::min(k_attention_tile, n - p0);
        gather_selected(kv, tables[seq_of_token[t]], selected + t * top_k + p0, m, s.rows.data());
        if (v_dim < dim) {  // the values: each row's first v_dim elements, side by side
          for (int64_t i = 0; i < m; ++i) std::copy_n(s.rows.data() + i * dim, v_dim, s.values.data() + i * v_dim);
        }
        tiles.scores(dim, s.queries.data(), n_q, s.rows.data(), m, shape.scale, s.head_scores.data(), k_attention_tile);
        for (int64_t i = 0; i < n_q; ++i) {
          const float factor = tiles.online_softmax(s.head_scores.data() + i * k_attention_tile, m, &s.max[size_t(i)], &s.sum[size_t(i)]);
          if (factor != 1.0f) {
            for (int64_t j = 0; j < v_dim; ++j) o[i * v_dim + j] *= factor;
          }
        }
        tiles.weighted_sum(v_dim, s.head_scores.data(), k_attention_tile, n_q, v_dim < dim ? s.values.data() : s.rows.data(), m, o);
      }
      for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t j = 0; j < v_dim; ++j) o[i * v_dim + j] /= s.sum[size_t(i)];
      }
    }
  });
}

void indexer_select_reference(const KvLayerView& keys, const float* q, int64_t n_heads, const float* weights, float weight_scale, int64_t n_tokens,
                              const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                              int64_t top_k, int32_t* selected, int32_t* n_selected) {
  const int64_t dim = keys.kv_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t n_ctx = int64_t(positions[t]) + 1;
    std::vector<float> rows(size_t(n_ctx * dim));
    kv_read(keys, keys.k, tables[seq_of_token[t]], 0, 0, n_ctx, rows.data());
    std::vector<float> queries(size_t(n_heads * dim));
    round_like_reference(keys.dtype, q + t * n_heads * dim, n_heads * dim, queries.data());
    std::vector<std::pair<double, int32_t>> ranked;
    for (int64_t p = 0; p < n_ctx; ++p) {
      double score = 0.0;
      for (int64_t h = 0; h < n_heads; ++h) {
        double d = 0.0;
        for (int64_t i = 0; i < dim; ++i) d += double(queries[size_t(h * dim + i)]) * rows[size_t(p * dim + i)];
        score += double(weights[t * n_heads + h]) * weight_scale * std::max(0.0, d);
      }
      ranked.push_back({-score, int32_t(p)});
    }
    std::sort(ranked.begin(), ranked.end());
    const int64_t k = std::min(top_k, n_ctx);
    std::vector<int32_t> chosen;
    for (int64_t i = 0; i < k; ++i) chosen.push_back(ranked[size_t(i)].second);
    std::sort(chosen.begin(), chosen.end());
    std::copy(chosen.begin(), chosen.end(), selected + t * top_k);
    n_selected[t] = int32_t(k);
  }
}

void sparse_attention_reference(const KvLayerView& kv, const AttentionShape& shape, const float* q, int64_t n_tokens,
                                const int32_t* seq_of_token, const BlockTableView* tables, const int32_t* selected,
                                const int32_t* n_selected, int64_t top_k, float* out) {
  const int64_t dim = shape.head_dim, v_dim = shape.value_dim(), row = kv.kv_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t n = n_selected[t];
    std::vector<float> rows(size_t(n * row));
    for (int64_t i = 0; i < n; ++i) kv_read(kv, kv.k, tables[seq_of_token[t]], 0, selected[t * top_k + i], 1, &rows[size_t(i * row)]);
    for (int64_t h = 0; h < shape.n_head; ++h) {
      std::vector<float> query(static_cast<size_t>(dim));
      round_like_reference(kv.dtype, q + (t * shape.n_head + h) * dim, dim, query.data());
      std::vector<double> p(static_cast<size_t>(n));
      double max = -INFINITY, sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        double d = 0.0;
        for (int64_t j = 0; j < dim; ++j) d += double(query[size_t(j)]) * rows[size_t(i * row + j)];
        p[size_t(i)] = d * shape.scale;
        max = std::max(max, p[size_t(i)]);
      }
      for (double& x : p) sum += x = std::exp(x - max);
      for (int64_t j = 0; j < v_dim; ++j) {
        double o = 0.0;
        for (int64_t i = 0; i < n; ++i) o += p[size_t(i)] / sum * rows[size_t(i * row + j)];
        out[(t * shape.n_head + h) * v_dim + j] = float(o);
      }
    }
  }
}

}  // namespace ds
