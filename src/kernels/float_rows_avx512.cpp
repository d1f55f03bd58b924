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
// products.
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

// `next`, when not null, is the next tile's first row: each wide step
// fetches the next tile's rows at its columns into L2 (decode: four more
// streams ahead of the four the tile reads).
template <typename Elements, int R, int T>
void tile(const uint8_t* w, int64_t w_row_bytes, int64_t n, const uint8_t* x, int64_t x_row_bytes, float* y,
          int64_t y_stride, const uint8_t* next) {
  constexpr int64_t step_cols = Elements::k_step;
  __m512 acc[R][T];
  for (auto& row : acc) for (auto& v : row) v = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * step_cols <= n; i += 2 * step_cols) {
    if (next) {
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + r * w_row_bytes + i * Elements::k_bytes), _MM_HINT_T1);
    }
    decltype(Elements::load_wide(x, 0)) a[T];
    for (int t = 0; t < T; ++t) a[t] = Elements::load_wide(x + t * x_row_bytes, i);
    for (int r = 0; r < R; ++r) {
      const auto wv = Elements::load_wide(w + r * w_row_bytes, i);
      for (int t = 0; t < T; ++t) acc[r][t] = Elements::madd_wide(wv, a[t], acc[r][t]);
    }
  }
  if (i + step_cols <= n) {  // one more even step: the low halves only
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

using TileFn = void (*)(const uint8_t*, int64_t, int64_t, const uint8_t*, int64_t, float*, int64_t, const uint8_t*);

template <typename Elements, int R, int... T>
constexpr std::array<TileFn, sizeof...(T)> tiles_of_rows(std::integer_sequence<int, T...>) {
  return {tile<Elements, R, T + 1>...};
}

// k_tiles<E>[rows - 1][tokens - 1]
template <typename Elements, int... R>
constexpr std::array<std::array<TileFn, k_tile_tokens<Elements>>, sizeof...(R)> tile_table(std::integer_sequence<int, R...>) {
  return {tiles_of_rows<Elements, R + 1>(std::make_integer_sequence<int, k_tile_tokens<Elements>>())...};
}

template <typename Elements>
constexpr auto k_tiles = tile_table<Elements>(std::make_integer_sequence<int, k_tile_rows>());

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
  const bool fetch_ahead = n_tokens <= tile_tokens;
  for (int64_t r = row_begin; r < row_end; r += k_tile_rows) {
    const int64_t rows = std::min<int64_t>(k_tile_rows, row_end - r);
    // Only a whole next tile within the range: no address past the rows given.
    const uint8_t* next = fetch_ahead && r + 2 * k_tile_rows <= row_end ? w + (r + k_tile_rows) * w_row_bytes : nullptr;
    for (int64_t t = 0; t < n_tokens; t += tile_tokens) {
      const int64_t tokens = std::min<int64_t>(tile_tokens, n_tokens - t);
      k_tiles<Elements>[size_t(rows - 1)][size_t(tokens - 1)](w + r * w_row_bytes, w_row_bytes, n_cols, x + t * x_row_bytes,
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
