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

// Consecutive tokens of one sequence at consecutive positions (a prefill
// chunk, a draft being verified) share the passes too, up to a query block
// at a time, so that a tile of cached rows converted once meets all their
// heads. Each token still does its own arithmetic: its scores, a softmax over
// its own positions, values weighted up to its own position only, so the
// block size changes no result. Blocks of 16 tokens convert each cached row
// a quarter as often as blocks of 4 (pp4096 on the 1.1B Llama: 194 against
// 180 tok/s, 2 threads); a step of few tokens takes smaller blocks, down to
// one token, so that every thread still has several units of work.
constexpr int64_t k_query_block = 16;
constexpr int64_t k_units_per_thread = 4;

// units_alone: the units of the step's tokens each alone (items x key
// ranges, summed); blocks of b tokens make about 1 / b of them.
int64_t query_block_for(int64_t units_alone, int n_threads) {
  int64_t block = k_query_block;
  while (block > 1 && units_alone / block < k_units_per_thread * n_threads) block /= 2;
  return block;
}

// Split-K (FlashDecoding's, vLLM's partitions): a token's context is cut into
// ranges of k_key_range positions at fixed offsets, each range attended to on
// its own by any thread, and the ranges' softmax states merged in order
// afterwards, so that a single long sequence's decode keeps every thread busy
// where its heads alone would not. The cut depends only on the position, so
// a token's result does not depend on the thread count or the step's other
// tokens.
constexpr int64_t k_key_range = 512;
static_assert(k_key_range % k_position_tile == 0, "ranges hold whole tiles");

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

// Asks for the cache lines of positions [p0, p0 + n) of one KV head ahead of
// their conversion: a head's rows are contiguous only within a page, and the
// hardware prefetchers do not follow the jumps between pages (two tiles ahead
// measured 1.17x on a decode step over 8,192 positions in DRAM).
void prefetch_rows(const KvLayerView& kv, const uint8_t* memory, const BlockTableView& table, int64_t kv_head, int64_t p0,
                   int64_t n) {
  const size_t head_bytes = kv_bytes(kv, kv.head_dim());
  for (int64_t j = 0; j < n;) {
    const int64_t run = std::min(n - j, kv.page_tokens - (p0 + j) % kv.page_tokens);
    const uint8_t* first = memory + slot_offset(kv, table, p0 + j, kv_head);
    for (size_t line = 0; line < size_t(run) * head_bytes; line += 64) __builtin_prefetch(first + line);
    j += run;
  }
}

// The heads of one item: up to k_heads_per_item heads of one KV head's group.
struct ItemHeads {
  int64_t kv_head, first, count;
};

ItemHeads item_heads(const AttentionShape& shape, int64_t item) {
  const int64_t group = shape.n_head / shape.n_head_kv, head_blocks = (group + k_heads_per_item - 1) / k_heads_per_item;
  const int64_t kv_head = item / head_blocks, first = kv_head * group + item % head_blocks * k_heads_per_item;
  return {kv_head, first, std::min(k_heads_per_item, (kv_head + 1) * group - first)};
}

// A key range's softmax state for an item's heads: their output rows (v_dim
// apart, not yet divided by the sums), maxima and sums.
struct RangeState {
  float* out;
  float* max;
  float* sum;
};

// The states of a step's (token, item, key range) triples in one buffer:
// each one's output rows for up to `capacity` heads, then their maxima, then
// their sums.
struct RangeStates {
  float* data;
  int64_t capacity, v_dim;
  static int64_t floats(int64_t capacity, int64_t v_dim) { return capacity * (v_dim + 2); }
  RangeState operator[](int64_t index) const {
    float* state = data + index * floats(capacity, v_dim);
    return {state, state + capacity * v_dim, state + capacity * (v_dim + 1)};
  }
};

// Tokens at consecutive positions of one sequence whose queries share passes
// over its cache: token k of the block is at position first_position + k,
// its heads' queries at q + k * q_stride.
struct QueryBlock {
  const float* q;
  int64_t q_stride, n_tokens, first_position;
};

// The block's attention to positions [p_begin, p_end) (p_end at most one past
// its last token), for each token up to its own position: into buffers.out
// (row k * heads.count + i for token k's head i), buffers.max and buffers.sum.
void attend_key_range(const KvLayerView& kv, const AttentionShape& shape, const QueryBlock& block, const BlockTableView& table,
                      const ItemHeads& heads, int64_t p_begin, int64_t p_end, AttentionScratch::PerThread& buffers) {
  const AttentionTileKernels& tiles = attention_tile_kernels();
  const int64_t head_dim = shape.head_dim, v_dim = shape.value_dim(), n_rows = block.n_tokens * heads.count;
  float* scores = buffers.scores.data();
  float* queries = buffers.queries.data();
  float* rows = buffers.rows.data();
  float* out = buffers.out.data();
  const auto token_end = [&](int64_t k) { return std::min(p_end, block.first_position + k + 1); };
  // Queries are rounded to the cache's type before q·k, as llama.cpp does, so
  // that both engines see the same products; the tokens' rows side by side,
  // as the score tiles read them. Per key range, which with F16C costs a
  // thousandth of the range's products (the scalar conversions it replaced
  // cost as much as them), and needs no buffer as large as the step's queries.
  for (int64_t k = 0; k < block.n_tokens; ++k) {
    tiles.round_to_cache(kv.dtype, block.q + k * block.q_stride, queries + k * heads.count * head_dim, heads.count * head_dim);
  }
  // Cached rows p0.. in f32: whole rows a page at a time, or one by one when
  // only the first dim elements of each row are wanted.
  const auto cached_rows = [&](const uint8_t* base, int64_t p0, int64_t n_positions, int64_t dim) {
    if (dim == head_dim) return kv_read(kv, base, table, heads.kv_head, p0, n_positions, rows);
    for (int64_t j = 0; j < n_positions; ++j) {
      tiles.to_f32(kv.dtype, base + slot_offset(kv, table, p0 + j, heads.kv_head), rows + j * dim, dim);
    }
  };
  // The tile two ahead of p0's, while p0's is converted and multiplied.
  const auto prefetch_ahead = [&](const uint8_t* base, int64_t p0) {
    const int64_t ahead = p0 + 2 * k_position_tile;
    if (ahead < p_end) prefetch_rows(kv, base, table, heads.kv_head, ahead, std::min(k_position_tile, p_end - ahead));
  };
  // Scores past a token's own position are computed with the others' and
  // never read.
  for (int64_t p0 = p_begin; p0 < p_end; p0 += k_position_tile) {
    const int64_t n_positions = std::min(k_position_tile, p_end - p0);
    prefetch_ahead(kv.k, p0);
    cached_rows(kv.k, p0, n_positions, head_dim);
    tiles.scores(head_dim, queries, n_rows, rows, n_positions, shape.scale, scores + (p0 - p_begin), k_key_range);
  }
  for (int64_t row = 0; row < n_rows; ++row) {
    buffers.max[size_t(row)] = -INFINITY, buffers.sum[size_t(row)] = 0.0f;
    tiles.online_softmax(scores + row * k_key_range, token_end(row / heads.count) - p_begin, &buffers.max[size_t(row)],
                         &buffers.sum[size_t(row)]);
  }
  std::memset(out, 0, size_t(n_rows * v_dim) * sizeof(float));
  for (int64_t p0 = p_begin; p0 < p_end; p0 += k_position_tile) {
    const int64_t n_positions = std::min(k_position_tile, p_end - p0);
    prefetch_ahead(kv.v ? kv.v : kv.k, p0);
    cached_rows(kv.v ? kv.v : kv.k, p0, n_positions, v_dim);
    // Tokens k_whole.. see the whole tile; those before it, up to their own position.
    int64_t k_whole = 0;
    while (k_whole < block.n_tokens && token_end(k_whole) < p0 + n_positions) ++k_whole;
    for (int64_t k = 0; k < k_whole; ++k) {
      if (token_end(k) <= p0) continue;
      tiles.weighted_sum(v_dim, scores + k * heads.count * k_key_range + (p0 - p_begin), k_key_range, heads.count, rows,
                         token_end(k) - p0, out + k * heads.count * v_dim);
    }
    tiles.weighted_sum(v_dim, scores + k_whole * heads.count * k_key_range + (p0 - p_begin), k_key_range,
                       (block.n_tokens - k_whole) * heads.count, rows, n_positions, out + k_whole * heads.count * v_dim);
  }
}

// out[d] = row[d] * (1 / sum) for v_dim elements (row may be out).
void divide_row(const float* row, float* out, int64_t v_dim, float sum) {
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < v_dim; ++d) out[d] = row[d] * inv;
}

// Head i's output row from the states of its key ranges (first.. of
// `states`), in order: out = sum_r e^(max_r - M) out_r / sum_r e^(max_r - M)
// sum_r, M the largest max_r. For one range that is out_0 * (1 / sum_0)
// exactly, which the unit writes directly instead.
void merge_key_ranges(const RangeStates& states, int64_t first, int64_t n_ranges, int64_t i, float* out) {
  const int64_t v_dim = states.v_dim;
  float m = -INFINITY;
  for (int64_t r = 0; r < n_ranges; ++r) m = std::max(m, states[first + r].max[i]);
  std::memset(out, 0, size_t(v_dim) * sizeof(float));
  float total = 0.0f;
  for (int64_t r = 0; r < n_ranges; ++r) {
    const RangeState state = states[first + r];
    const float weight = std::exp(state.max[i] - m);
    total += weight * state.sum[i];
    const float* o = state.out + i * v_dim;
    for (int64_t d = 0; d < v_dim; ++d) out[d] += weight * o[d];
  }
  divide_row(out, out, v_dim, total);
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
  const int64_t items_per_token = shape.n_head_kv * ((group + k_heads_per_item - 1) / k_heads_per_item);
  const auto ranges_of = [&](int64_t t) { return (int64_t(positions[t]) + k_key_range) / k_key_range; };
  int64_t units_alone = 0;
  for (int64_t t = 0; t < n_tokens; ++t) units_alone += items_per_token * ranges_of(t);
  const int n_threads = pool.n_threads();
  const int64_t query_block = query_block_for(units_alone, n_threads);
  const int64_t heads_per_item = std::min(k_heads_per_item, group), rows_per_unit = query_block * heads_per_item;
  const int64_t state_floats = RangeStates::floats(heads_per_item, v_dim);
  DS_CHECK(kv.head_dim() == head_dim && kv.n_kv_heads == shape.n_head_kv, "KV layout and attention shape differ");
  if (int(scratch.threads.size()) < n_threads) scratch.threads.resize(static_cast<size_t>(n_threads));
  for (AttentionScratch::PerThread& buffers : scratch.threads) {
    grow(buffers.scores, rows_per_unit * k_key_range);
    grow(buffers.queries, rows_per_unit * head_dim);
    grow(buffers.rows, k_position_tile * std::max(head_dim, v_dim));
    grow(buffers.out, rows_per_unit * v_dim);
    grow(buffers.max, rows_per_unit);
    grow(buffers.sum, rows_per_unit);
  }
  std::vector<int64_t>& block_first = scratch.block_first;
  block_first.clear();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const bool continues = t > 0 && t - block_first.back() < query_block && seq_of_token[t] == seq_of_token[t - 1] &&
                           positions[t] == positions[t - 1] + 1;
    if (!continues) block_first.push_back(t);
  }
  const int64_t n_blocks = int64_t(block_first.size());
  block_first.push_back(n_tokens);

  // A unit is one key range of one item of one block. Later blocks attend to
  // more ranges: units are handed out dynamically. The units of blocks
  // [b_begin, b_end) run together, as many blocks as partial_floats_limit
  // holds the range states of (a token of one range needs none: it writes
  // its output directly).
  std::vector<int64_t>& first_unit = scratch.first_unit;
  std::vector<int64_t>& first_state = scratch.first_state;
  for (int64_t b_begin = 0, b_end = 0; b_begin < n_blocks; b_begin = b_end) {
    const int64_t t_begin = block_first[size_t(b_begin)];
    first_unit.assign(1, 0);
    first_state.assign(1, 0);
    for (b_end = b_begin; b_end < n_blocks; ++b_end) {
      const size_t held = first_state.size();
      for (int64_t t = block_first[size_t(b_end)]; t < block_first[size_t(b_end) + 1]; ++t) {
        first_state.push_back(first_state.back() + (ranges_of(t) > 1 ? items_per_token * ranges_of(t) : 0));
      }
      if (b_end > b_begin && first_state.back() * state_floats > scratch.partial_floats_limit) {
        first_state.resize(held);  // this block starts the next wave
        break;
      }
      first_unit.push_back(first_unit.back() + items_per_token * ranges_of(block_first[size_t(b_end) + 1] - 1));
    }
    const int64_t t_end = block_first[size_t(b_end)];
    grow(scratch.partials, first_state.back() * state_floats);
    const RangeStates states{scratch.partials.data(), heads_per_item, v_dim};

    pool.parallel_for_dynamic(first_unit.back(), 1, [&](int64_t begin, int64_t end, int thread_index) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t b = b_begin + (std::upper_bound(first_unit.begin(), first_unit.end(), unit) - first_unit.begin() - 1);
        const int64_t t_first = block_first[size_t(b)], t_last = block_first[size_t(b) + 1] - 1;
        const int64_t n_ranges = ranges_of(t_last), local = unit - first_unit[size_t(b - b_begin)];
        const int64_t item = local / n_ranges, range = local % n_ranges;
        const ItemHeads heads = item_heads(shape, item);
        // The block's tokens that reach this range: those at p_begin or later.
        const int64_t p_begin = range * k_key_range, p_end = std::min<int64_t>(p_begin + k_key_range, positions[t_last] + 1);
        const int64_t t_lo = t_first + std::max<int64_t>(0, p_begin - positions[t_first]);
        const QueryBlock block{q + (t_lo * shape.n_head + heads.first) * head_dim, shape.n_head * head_dim, t_last + 1 - t_lo,
                               positions[t_lo]};
        AttentionScratch::PerThread& buffers = scratch.threads[size_t(thread_index)];
        attend_key_range(kv, shape, block, tables[seq_of_token[t_first]], heads, p_begin, p_end, buffers);
        for (int64_t t = t_lo; t <= t_last; ++t) {
          const int64_t row = (t - t_lo) * heads.count;
          const float* rows = buffers.out.data() + row * v_dim;
          if (ranges_of(t) == 1) {  // the merge would only divide the rows by the sums
            for (int64_t i = 0; i < heads.count; ++i) {
              divide_row(rows + i * v_dim, out + (t * shape.n_head + heads.first + i) * v_dim, v_dim, buffers.sum[size_t(row + i)]);
            }
            continue;
          }
          const RangeState state = states[first_state[size_t(t - t_begin)] + item * ranges_of(t) + range];
          std::memcpy(state.out, rows, size_t(heads.count * v_dim) * sizeof(float));
          std::memcpy(state.max, &buffers.max[size_t(row)], size_t(heads.count) * sizeof(float));
          std::memcpy(state.sum, &buffers.sum[size_t(row)], size_t(heads.count) * sizeof(float));
        }
      }
    });
    if (first_state.back() == 0) continue;  // no token of more than one range
    pool.parallel_for((t_end - t_begin) * items_per_token, [&](int64_t begin, int64_t end) {
      for (int64_t wave_item = begin; wave_item < end; ++wave_item) {
        const int64_t t = t_begin + wave_item / items_per_token, item = wave_item % items_per_token, n_ranges = ranges_of(t);
        if (n_ranges == 1) continue;
        const ItemHeads heads = item_heads(shape, item);
        const int64_t first = first_state[size_t(t - t_begin)] + item * n_ranges;
        for (int64_t i = 0; i < heads.count; ++i) {
          merge_key_ranges(states, first, n_ranges, i, out + (t * shape.n_head + heads.first + i) * v_dim);
        }
      }
    });
  }
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
