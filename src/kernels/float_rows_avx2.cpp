// AVX2 + FMA + F16C tiles for float weight rows (float_rows.h). Compiled with
// -mavx2 -mfma -mf16c and only called when cpu_features() reports all three.

#include "kernels/float_rows.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/float_elements_x86.h"

namespace ds {
namespace {

// R rows by T tokens, the whole row length, two accumulators per (row, token):
// the even and the odd steps, so that one row alone keeps two FMA chains in
// flight. Each token's step of activations is loaded once for the R rows.
template <typename Elements, int R, int T>
void tile(const uint8_t* w, int64_t w_row_bytes, int64_t n, const uint8_t* x, int64_t x_row_bytes, float* y,
          int64_t y_stride) {
  constexpr int64_t step_cols = Elements::k_step;
  __m256 acc[2][R][T];
  for (auto& half : acc) for (auto& row : half) for (auto& v : row) v = _mm256_setzero_ps();
  const auto step = [&](int64_t i, int half) {
    decltype(Elements::load(x, 0)) a[T];
    for (int t = 0; t < T; ++t) a[t] = Elements::load(x + t * x_row_bytes, i);
    for (int r = 0; r < R; ++r) {
      const auto wv = Elements::load(w + r * w_row_bytes, i);
      for (int t = 0; t < T; ++t) acc[half][r][t] = Elements::madd(wv, a[t], acc[half][r][t]);
    }
  };
  int64_t i = 0;
  for (; i + 2 * step_cols <= n; i += 2 * step_cols) {
    step(i, 0);
    step(i + step_cols, 1);
  }
  if (i + step_cols <= n) step(i, 0), i += step_cols;
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      y[t * y_stride + r] = finish_row_dot<Elements>(acc[0][r][t], acc[1][r][t], w + r * w_row_bytes, x + t * x_row_bytes, i, n);
    }
  }
}

constexpr int64_t k_tile_rows = 2;
constexpr int k_tile_tokens = 3;

using TileFn = void (*)(const uint8_t*, int64_t, int64_t, const uint8_t*, int64_t, float*, int64_t);

template <typename Elements, int R>
constexpr TileFn tile_for_tokens(int tokens) {
  return tokens == 3 ? tile<Elements, R, 3> : tokens == 2 ? tile<Elements, R, 2> : tile<Elements, R, 1>;
}

// Two rows at a time by up to three tokens (larger tiles spill their
// accumulators), decode included: its two rows keep four FMA chains in flight
// where one row's two waited on the FMA latency (F16 and BF16 tg32 on the 1.1B
// model 22% faster on a Sapphire Rapids-class Xeon; the rows are adjacent
// streams, in huge pages once copied at load).
template <typename Elements>
void float_rows(const uint8_t* w, int64_t w_row_bytes, int64_t n_cols, int64_t row_begin, int64_t row_end,
                const uint8_t* x, int64_t x_row_bytes, int64_t n_tokens, float* y, int64_t y_stride) {
  for (int64_t r = row_begin; r < row_end; r += k_tile_rows) {
    const int64_t rows = std::min(k_tile_rows, row_end - r);
    for (int64_t t = 0; t < n_tokens; t += k_tile_tokens) {
      const int tokens = int(std::min<int64_t>(k_tile_tokens, n_tokens - t));
      const TileFn fn = rows == 2 ? tile_for_tokens<Elements, 2>(tokens) : tile_for_tokens<Elements, 1>(tokens);
      fn(w + r * w_row_bytes, w_row_bytes, n_cols, x + t * x_row_bytes, x_row_bytes, y + t * y_stride + r, y_stride);
    }
  }
}

}  // namespace

FloatRowsFn float_rows_avx2(DType weight_type) {
  return for_float_elements<BF16Elements>(weight_type, [](auto elements) -> FloatRowsFn { return float_rows<decltype(elements)>; });
}

}  // namespace ds
