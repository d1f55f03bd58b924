// AVX-512 tiles for float weight rows (float_rows.h): one zmm accumulator
// per (row, token) holds both of the AVX2 tiles' accumulators, the even step
// in its low half and the odd step in its high half, so that a wide step is
// one instruction per pair and both tile kinds add in the same order (the
// same bits). With 32 registers a tile is four rows by six tokens: per wide
// step ten loads and conversions feed 24 FMAs, where the AVX2 tile's five feed
// six (the conversions compete with the FMAs for the FP ports). Measured on
// Zen 4, one core: 82-92% of the FMA peak against the AVX2 tile's 69-90%
// (least at 8192 columns); F16 pp512 8-35% faster.
//
// Decode runs here too, with half the AVX2 kernel's instructions for the same
// products. F16 prefill runs the same tiles against tokens converted once
// for a run of rows (float_rows_in_parts, below).
// BF16 runs here with vdpbf16ps where use_bf16_dot_kernels(): 32 columns of
// raw BF16 with no conversion at all (twice the FMA tile's rate on Zen 4,
// measured) and flushes denormals, which the AVX2 tiles' FMAs keep, so decode
// must run it too. Elsewhere (Intel, where it is slow) BF16 runs the FMA
// tiles here, with the AVX2 tiles' bits.
// Compiled with -mavx512f -mavx512bf16 and only called when the VNNI kernels
// are enabled (every CPU with AVX-512 VNNI has AVX-512F), BF16 only when the
// CPU has AVX512_BF16.

#include "kernels/float_rows.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a variable
// initialised from itself, and warn about it at every inlining site.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "kernels/float_elements_x86.h"

namespace ds {
namespace {

constexpr int k_tile_rows = 4;
// Six tokens, or four for BF16 on FMAs, whose activations take two
// registers each (their pairs' odd and even halves): 4 x 6 accumulators
// and 12 such registers would not fit the 32.
template <typename Elements>
constexpr int k_tile_tokens = std::is_same_v<Elements, BF16Elements> ? 4 : 6;

// The wide steps over columns [i0, i1) of a tile: the weights' rows at w,
// read by W, the tokens' at x, read by X at column i - x_col0. `next`, when
// not null, is the next tile's first row: each wide step fetches the next
// tile's rows at its columns into L2 (decode: four more streams ahead of the
// four the tile reads).
template <typename W, typename X, int R, int T>
inline void wide_steps(__m512 (&acc)[R][T], const uint8_t* w, int64_t w_row_bytes, int64_t i0, int64_t i1, const uint8_t* x,
                       int64_t x_row_bytes, int64_t x_col0, const uint8_t* next) {
  for (int64_t i = i0; i < i1; i += 2 * W::k_step) {
    if (next) {
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + r * w_row_bytes + i * W::k_bytes), _MM_HINT_T1);
    }
    decltype(X::load_wide(x, 0)) a[T];
    for (int t = 0; t < T; ++t) a[t] = X::load_wide(x + t * x_row_bytes, i - x_col0);
    for (int r = 0; r < R; ++r) {
      const auto wv = W::load_wide(w + r * w_row_bytes, i);
      for (int t = 0; t < T; ++t) acc[r][t] = W::madd_wide(wv, a[t], acc[r][t]);
    }
  }
}

// Columns [i, n) of a tile past its wide steps, and the sums: one more even
// step (the low halves only) where it fits, then finish_row_dot.
template <typename Elements, int R, int T>
inline void finish_tile(__m512 (&acc)[R][T], const uint8_t* w, int64_t w_row_bytes, int64_t i, int64_t n, const uint8_t* x,
                        int64_t x_row_bytes, float* y, int64_t y_stride) {
  constexpr int64_t step_cols = Elements::k_step;
  if (i + step_cols <= n) {
    decltype(Elements::load_low(x, 0)) a[T];
    for (int t = 0; t < T; ++t) a[t] = Elements::load_low(x + t * x_row_bytes, i);
    for (int r = 0; r < R; ++r) {
      const auto wv = Elements::load_low(w + r * w_row_bytes, i);
      for (int t = 0; t < T; ++t) acc[r][t] = Elements::madd_low(wv, a[t], acc[r][t]);
    }
    i += step_cols;
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      const __m256 even = _mm512_castps512_ps256(acc[r][t]);
      const __m256 odd = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][t]), 1));
      y[t * y_stride + r] = finish_row_dot<Elements>(even, odd, w + r * w_row_bytes, x + t * x_row_bytes, i, n);
    }
  }
}

// The columns a tile takes in wide steps.
template <typename Elements>
constexpr int64_t wide_columns(int64_t n) {
  return n / (2 * Elements::k_step) * (2 * Elements::k_step);
}

// A tile over every column: R rows against T tokens.
template <typename Elements, int R, int T>
struct WholeTile {
  static void run(const uint8_t* w, int64_t w_row_bytes, int64_t n, const uint8_t* x, int64_t x_row_bytes, float* y,
                  int64_t y_stride, const uint8_t* next) {
    __m512 acc[R][T];
    for (auto& row : acc) for (auto& v : row) v = _mm512_setzero_ps();
    const int64_t wide = wide_columns<Elements>(n);
    wide_steps<Elements, Elements>(acc, w, w_row_bytes, 0, wide, x, x_row_bytes, 0, next);
    finish_tile<Elements>(acc, w, w_row_bytes, wide, n, x, x_row_bytes, y, y_stride);
  }
};

// Prefill of F16 (more than one tile of tokens). A tile converts its rows'
// and its tokens' halves at every wide step: ten vcvtph2ps, two uops each on
// the FMA ports, beside 24 FMAs. The tokens' are converted once instead: a
// part of k_part_columns columns of a tile of tokens, as floats, into a
// buffer that stays in L1 (24 KiB), which the tiles of up to k_part_rows
// rows then read; a tile's accumulators stay in memory between its parts.
// The same products in the same order: the same bits. Measured on a 2-core
// Xeon (no AMX), one thread, 256 x 2048 rows against 30 tokens handed 64
// rows at a time: 14.4 -> 17.2 multiply-adds a cycle; a step of 24 FMAs
// against the four rows' conversions and six loads from L1 takes 18 cycles,
// where 24 FMAs alone take 13 (this core loads about one zmm a cycle).
// The rows' halves stay converted in the tiles: both operands from f32
// buffers sent the rows through L2 (slower), and BF16's pairs read back from
// such a buffer (two loads a token where the tile splits one) ran its pp512
// 16% slower.
constexpr int64_t k_part_columns = 1024;
constexpr int64_t k_part_rows = 64;

template <typename Elements, int R, int T>
struct PartTile {
  // The wide steps over columns [i0, i1) against the tokens' part (floats,
  // k_part_columns a token), which starts at column i0.
  static void run(__m512* acc_mem, const uint8_t* w, int64_t w_row_bytes, int64_t i0, int64_t i1, const float* x_part) {
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r) for (int t = 0; t < T; ++t) acc[r][t] = _mm512_load_ps(acc_mem + r * T + t);
    wide_steps<Elements, F32Elements>(acc, w, w_row_bytes, i0, i1, reinterpret_cast<const uint8_t*>(x_part),
                                      k_part_columns * int64_t(sizeof(float)), i0, nullptr);
    for (int r = 0; r < R; ++r) for (int t = 0; t < T; ++t) _mm512_store_ps(acc_mem + r * T + t, acc[r][t]);
  }
};

template <typename Elements, int R, int T>
struct FinishPartTile {
  static void run(const __m512* acc_mem, const uint8_t* w, int64_t w_row_bytes, int64_t n, const uint8_t* x,
                  int64_t x_row_bytes, float* y, int64_t y_stride) {
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r) for (int t = 0; t < T; ++t) acc[r][t] = _mm512_load_ps(acc_mem + r * T + t);
    finish_tile<Elements>(acc, w, w_row_bytes, wide_columns<Elements>(n), n, x, x_row_bytes, y, y_stride);
  }
};

// k_tiles<Kind, E>[rows - 1][tokens - 1]: Kind<E, rows, tokens>::run.
template <template <typename, int, int> class Kind, typename Elements, int R, int... T>
constexpr auto tiles_of_rows(std::integer_sequence<int, T...>) {
  return std::array{&Kind<Elements, R, T + 1>::run...};
}

template <template <typename, int, int> class Kind, typename Elements, int... R>
constexpr auto tile_table(std::integer_sequence<int, R...>) {
  return std::array{tiles_of_rows<Kind, Elements, R + 1>(std::make_integer_sequence<int, k_tile_tokens<Elements>>())...};
}

template <template <typename, int, int> class Kind, typename Elements>
constexpr auto k_tiles = tile_table<Kind, Elements>(std::make_integer_sequence<int, k_tile_rows>());

template <typename Elements>
void float_rows_in_parts(const uint8_t* w, int64_t w_row_bytes, int64_t n_cols, int64_t row_begin, int64_t row_end,
                         const uint8_t* x, int64_t x_row_bytes, int64_t n_tokens, float* y, int64_t y_stride) {
  constexpr int T = k_tile_tokens<Elements>;
  alignas(64) float x_part[T][k_part_columns];
  alignas(64) __m512 acc[k_part_rows / k_tile_rows][k_tile_rows * T];
  const int64_t wide = wide_columns<Elements>(n_cols);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += k_part_rows) {
    const int64_t r1 = std::min(row_end, r0 + k_part_rows);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += T) {
      const int64_t tokens = std::min<int64_t>(T, n_tokens - t0);
      const uint8_t* x_tile = x + t0 * x_row_bytes;
      for (auto& tile_acc : acc) for (auto& v : tile_acc) v = _mm512_setzero_ps();
      for (int64_t i0 = 0; i0 < wide; i0 += k_part_columns) {
        const int64_t i1 = std::min(wide, i0 + k_part_columns);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t i = i0; i < i1; i += 2 * Elements::k_step) _mm512_store_ps(&x_part[t][i - i0], Elements::load_wide(x_tile + t * x_row_bytes, i));
        }
        for (int64_t r = r0; r < r1; r += k_tile_rows) {
          const int64_t rows = std::min<int64_t>(k_tile_rows, r1 - r);
          k_tiles<PartTile, Elements>[size_t(rows - 1)][size_t(tokens - 1)](acc[(r - r0) / k_tile_rows], w + r * w_row_bytes,
                                                                             w_row_bytes, i0, i1, x_part[0]);
        }
      }
      for (int64_t r = r0; r < r1; r += k_tile_rows) {
        const int64_t rows = std::min<int64_t>(k_tile_rows, r1 - r);
        k_tiles<FinishPartTile, Elements>[size_t(rows - 1)][size_t(tokens - 1)](
            acc[(r - r0) / k_tile_rows], w + r * w_row_bytes, w_row_bytes, n_cols, x_tile, x_row_bytes, y + t0 * y_stride + r, y_stride);
      }
    }
  }
}

// Four rows at a time against every token, the four rows staying in L1 while
// the tokens pass. Decode too: four rows keep four FMA chains in flight where
// one row's single chain waited on the FMA latency (the 1.1B model's tg32 on a
// Sapphire Rapids-class Xeon: F16 8.9 -> 11.4 tok/s, BF16 11.2 -> 12.7; a row
// at a time had been chosen for one sequential stream a thread, measured on
// 4 KiB pages before weights were copied into huge pages at load, and even on
// the file mapping's 4 KiB pages four rows now read faster: 7.9 -> 10.6).
// With one tile of tokens or fewer (memory-bound: each row is read once) the
// tile also fetches the next four rows ahead: F16 tg32 11.7 -> 12.8, BF16
// 12.6 -> 13.8 on that Xeon.
template <typename Elements>
void float_rows(const uint8_t* w, int64_t w_row_bytes, int64_t n_cols, int64_t row_begin, int64_t row_end,
                const uint8_t* x, int64_t x_row_bytes, int64_t n_tokens, float* y, int64_t y_stride) {
  constexpr int64_t tile_tokens = k_tile_tokens<Elements>;
  if constexpr (std::is_same_v<Elements, F16Elements>) {
    if (n_tokens > tile_tokens) {
      float_rows_in_parts<Elements>(w, w_row_bytes, n_cols, row_begin, row_end, x, x_row_bytes, n_tokens, y, y_stride);
      return;
    }
  }
  const bool fetch_ahead = n_tokens <= tile_tokens;
  for (int64_t r = row_begin; r < row_end; r += k_tile_rows) {
    const int64_t rows = std::min<int64_t>(k_tile_rows, row_end - r);
    // Only a whole next tile within the range: no address past the rows given.
    const uint8_t* next = fetch_ahead && r + 2 * k_tile_rows <= row_end ? w + (r + k_tile_rows) * w_row_bytes : nullptr;
    for (int64_t t = 0; t < n_tokens; t += tile_tokens) {
      const int64_t tokens = std::min<int64_t>(tile_tokens, n_tokens - t);
      k_tiles<WholeTile, Elements>[size_t(rows - 1)][size_t(tokens - 1)](w + r * w_row_bytes, w_row_bytes, n_cols, x + t * x_row_bytes,
                                                              x_row_bytes, y + t * y_stride + r, y_stride, next);
    }
  }
}

}  // namespace

FloatRowsFn float_rows_avx512(DType weight_type) {
  return for_float_elements<BF16Elements>(weight_type, [](auto elements) -> FloatRowsFn { return float_rows<decltype(elements)>; });
}

FloatRowsFn float_rows_avx512_bf16_dot() { return float_rows<BF16DotElements>; }

}  // namespace ds
