// AVX2 + FMA + F16C dot products. Compiled with -mavx2 -mfma -mf16c and only
// called when cpu_features() reports all three. Float weights (F32, F16,
// BF16) take the tiles of float_rows_avx2.cpp instead.
//
// Batch invariance: the single-row, four-token and 2x4 kernels of a type add
// the products of one (row, token) pair in the same order (one accumulator,
// blocks in sequence), so a token's logits do not depend on how many other
// tokens share its step. Continuous batching relies on this.

#include <immintrin.h>

#include <cstring>

#include "base/fp16.h"
#include "kernels/hsum_avx2.h"
#include "kernels/vec_dot.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

inline float load_fp16(uint16_t h) { return _cvtsh_ss(h); }

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_hadd_epi32(s, s);
  s = _mm_hadd_epi32(s, s);
  return _mm_cvtsi128_si32(s);
}

// Signed int8 x int8 products summed pairwise to 8 floats: maddubs needs an
// unsigned operand, so |x| times y with x's sign moved onto y.
inline __m256 mul_sum_i8(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  const __m256i dot16 = _mm256_maddubs_epi16(ax, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, _mm256_set1_epi16(1)));
}

// 32 nibbles -> 32 bytes: low nibbles first (elements 0..15), then high (16..31).
inline __m256i nibbles_to_bytes(const uint8_t* p) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// MXFP4's 32 codes -> their doubled values as signed bytes (exact; the block's
// halved E8M0 scale undoes the doubling): a table lookup per lane.
inline __m256i mxfp4_to_bytes(const BlockMxfp4& b) {
  const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k_mxfp4_values)));
  return _mm256_shuffle_epi8(values, nibbles_to_bytes(b.qs));
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / k_qk; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(x + b) + 1024, _MM_HINT_T0);  // decode streams the weights
    const __m256 d = _mm256_set1_ps(load_fp16(x[b].d) * load_fp16(y[b].d));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
  }
  return hsum(acc);
}

// W8A8: a row of int8 weights against rows of int8 activations, summed exactly
// in int32 over the whole row (the scales multiply afterwards, matmul.cpp). Per
// 32 products: vpsignb moves the weight's sign onto the activation, vpmaddubsw
// multiplies by |w| (an unsigned byte: 128 for a file's -128, so any weight
// byte is exact; a pair sums to at most 2 * 128 * 127 < 2^15 because the
// activations stay within ±127) and vpmaddwd and vpaddd widen into the int32
// lanes: 4 instructions, |w| computed once per weight chunk and shared by the
// tokens of a tile.
inline __m256i madd_i8(__m256i abs_w, __m256i w, __m256i a, __m256i acc) {
  const __m256i pairs = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(a, w));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

inline __m256i load_i8(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The products past the last whole 32, in order.
inline int32_t dot_i8_tail(int64_t from, int64_t n, const int8_t* w, const int8_t* a) {
  int32_t sum = 0;
  for (int64_t i = from; i < n; ++i) sum += int32_t(w[i]) * int32_t(a[i]);
  return sum;
}

float dot_i8(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const int8_t*>(wv);
  const auto* a = static_cast<const int8_t*>(av);
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + 1024, _MM_HINT_T0);  // decode streams the weights
    const __m256i wi = load_i8(w + i);
    acc = madd_i8(_mm256_sign_epi8(wi, wi), wi, load_i8(a + i), acc);
  }
  return float(hsum_i32(acc) + dot_i8_tail(i, n, w, a));
}

void dot4_i8(int64_t n, const void* wv, const void* av, int64_t a_stride, float* out) {
  const auto* w = static_cast<const int8_t*>(wv);
  const auto* a = static_cast<const int8_t*>(av);
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i wi = load_i8(w + i), abs_w = _mm256_sign_epi8(wi, wi);
    for (int j = 0; j < 4; ++j) acc[j] = madd_i8(abs_w, wi, load_i8(a + j * a_stride + i), acc[j]);
  }
  for (int j = 0; j < 4; ++j) out[j] = float(hsum_i32(acc[j]) + dot_i8_tail(i, n, w, a + j * a_stride));
}

void dot2x4_i8(int64_t n, const void* wv, int64_t w_stride, const void* av, int64_t a_stride, float* out) {
  const auto* w = static_cast<const int8_t*>(wv);
  const auto* a = static_cast<const int8_t*>(av);
  // Eight named accumulators (an array of them spills to the stack under GCC 12).
  __m256i r0t0 = _mm256_setzero_si256(), r0t1 = r0t0, r0t2 = r0t0, r0t3 = r0t0;
  __m256i r1t0 = r0t0, r1t1 = r0t0, r1t2 = r0t0, r1t3 = r0t0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i w0 = load_i8(w + i), w1 = load_i8(w + w_stride + i);
    const __m256i abs_w0 = _mm256_sign_epi8(w0, w0), abs_w1 = _mm256_sign_epi8(w1, w1);
    __m256i x = load_i8(a + i);
    r0t0 = madd_i8(abs_w0, w0, x, r0t0);
    r1t0 = madd_i8(abs_w1, w1, x, r1t0);
    x = load_i8(a + a_stride + i);
    r0t1 = madd_i8(abs_w0, w0, x, r0t1);
    r1t1 = madd_i8(abs_w1, w1, x, r1t1);
    x = load_i8(a + 2 * a_stride + i);
    r0t2 = madd_i8(abs_w0, w0, x, r0t2);
    r1t2 = madd_i8(abs_w1, w1, x, r1t2);
    x = load_i8(a + 3 * a_stride + i);
    r0t3 = madd_i8(abs_w0, w0, x, r0t3);
    r1t3 = madd_i8(abs_w1, w1, x, r1t3);
  }
  const __m256i sums[8] = {r0t0, r0t1, r0t2, r0t3, r1t0, r1t1, r1t2, r1t3};
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 4; ++j)
      out[r * 4 + j] = float(hsum_i32(sums[r * 4 + j]) + dot_i8_tail(i, n, w + r * w_stride, a + j * a_stride));
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i eight = _mm256_set1_epi8(8);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / k_qk; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(x + b) + 1024, _MM_HINT_T0);  // decode streams the weights
    const __m256 d = _mm256_set1_ps(load_fp16(x[b].d) * load_fp16(y[b].d));
    const __m256i qx = _mm256_sub_epi8(nibbles_to_bytes(x[b].qs), eight);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
  }
  return hsum(acc);
}

float dot_mxfp4(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / k_qk; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(x + b) + 1024, _MM_HINT_T0);  // decode streams the weights
    const __m256 d = _mm256_set1_ps(mxfp4_half_scale(x[b].e) * load_fp16(y[b].d));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8(mxfp4_to_bytes(x[b]), qy), acc);
  }
  return hsum(acc);
}

float dot_q4_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < n / k_qk; ++i) {
    mins += load_fp16(x[i].m) * load_fp16(y[i].s);
    const __m256 d = _mm256_set1_ps(load_fp16(x[i].d) * load_fp16(y[i].d));
    const __m256i qx = nibbles_to_bytes(x[i].qs);  // unsigned 0..15
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256i dot16 = _mm256_maddubs_epi16(qx, qy);
    const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, _mm256_set1_epi16(1)));
    acc = _mm256_fmadd_ps(d, dot, acc);
  }
  return hsum(acc) + mins;
}

// Q4_K x Q8_K: per sub-block of 32, an integer dot scaled by the 6-bit scale;
// the mins term comes from the activation's per-16 sums.
float dot_q4_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / k_qk_k; ++i) {
    uint8_t scales[8], mins[8];
    k_scales_mins(x[i].scales, scales, mins);
    int32_t sum_mins = 0;
    for (int sub = 0; sub < 8; ++sub) sum_mins += mins[sub] * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
    __m256i acc = _mm256_setzero_si256();
    for (int pair = 0; pair < 4; ++pair) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + pair * 32));
      const __m256i q_lo = _mm256_and_si256(packed, low_mask);
      const __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
      const __m256i y_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + pair * 64));
      const __m256i y_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + pair * 64 + 32));
      const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(q_lo, y_lo), _mm256_set1_epi16(scales[2 * pair]));
      const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(q_hi, y_hi), _mm256_set1_epi16(scales[2 * pair + 1]));
      acc = _mm256_add_epi32(acc, _mm256_add_epi32(p_lo, p_hi));
    }
    const int32_t sum_scaled = hsum_i32(acc);
    sum += y[i].d * (load_fp16(x[i].d) * float(sum_scaled) - load_fp16(x[i].dmin) * float(sum_mins));
  }
  return sum;
}

// Quarter `part` of a Q6_K half as unsigned 6-bit values: low nibbles from
// ql (l0 = bytes 0..31, l1 = 32..63), two high bits from qh.
inline __m256i q6_quarter(__m256i l0, __m256i l1, __m256i h, int part) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  const __m256i low = part % 2 == 0 ? l0 : l1;
  const __m256i nibbles = _mm256_and_si256(part < 2 ? low : _mm256_srli_epi16(low, 4), m4);
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(h, 2 * part), m2);
  return _mm256_or_si256(nibbles, _mm256_slli_epi16(high, 4));
}

// int16 lanes 0..7 = scales[sub], 8..15 = scales[sub + 1]: the two 16-element
// sub-blocks a quarter spans.
inline __m256i q6_scale_pair(const int8_t* scales, int sub) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(scales[sub])), _mm_set1_epi16(scales[sub + 1]), 1);
}

// Q6_K x Q8_K: weights are 6-bit with an offset of 32; the offset is removed
// through the activation sums so maddubs can take the unsigned weights.
float dot_q6_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / k_qk_k; ++i) {
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* q8 = y[i].qs;
    __m256i acc = _mm256_setzero_si256();
    int32_t offset_sum = 0;
    for (int sub = 0; sub < 16; ++sub) offset_sum += x[i].scales[sub] * y[i].bsums[sub];
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, q8 += 128) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      for (int part = 0; part < 4; ++part) {
        const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + part * 32));
        const __m256i prod = _mm256_maddubs_epi16(q6_quarter(l0, l1, h, part), yv);  // pairs of elements
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(prod, q6_scale_pair(x[i].scales, half * 8 + part * 2)));
      }
    }
    const int32_t total = hsum_i32(acc) - 32 * offset_sum;
    sum += load_fp16(x[i].d) * y[i].d * float(total);
  }
  return sum;
}

// Four activation rows against one weight row: the weight block is loaded and
// unpacked once for all four.
template <typename Unpack>
void dot4_q_q8_0(int64_t n, const void* a, int64_t a_stride, float* out, Unpack unpack_block) {
  const auto* y0 = static_cast<const BlockQ8_0*>(a);
  const auto* y1 = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + a_stride);
  const auto* y2 = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + 2 * a_stride);
  const auto* y3 = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + 3 * a_stride);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n / k_qk; ++i) {
    float dw;
    const __m256i qx = unpack_block(i, &dw);
    const __m256i ax = _mm256_sign_epi8(qx, qx);
    auto step = [&](const BlockQ8_0& y, __m256& acc) {
      const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs));
      const __m256i dot16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx));
      const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, ones));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * load_fp16(y.d)), dot, acc);
    };
    step(y0[i], acc0);
    step(y1[i], acc1);
    step(y2[i], acc2);
    step(y3[i], acc3);
  }
  out[0] = hsum(acc0);
  out[1] = hsum(acc1);
  out[2] = hsum(acc2);
  out[3] = hsum(acc3);
}

void dot4_q8_0(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  dot4_q_q8_0(n, a, a_stride, out, [x](int64_t i, float* d) {
    *d = load_fp16(x[i].d);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
  });
}

void dot4_q4_0(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const __m256i eight = _mm256_set1_epi8(8);
  dot4_q_q8_0(n, a, a_stride, out, [x, eight](int64_t i, float* d) {
    *d = load_fp16(x[i].d);
    return _mm256_sub_epi8(nibbles_to_bytes(x[i].qs), eight);
  });
}

void dot4_mxfp4(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  dot4_q_q8_0(n, a, a_stride, out, [x](int64_t i, float* d) {
    *d = mxfp4_half_scale(x[i].e);
    return mxfp4_to_bytes(x[i]);
  });
}

// Two weight rows against four activation rows: each unpacked weight block
// serves four tokens and each activation block two rows.
template <typename Unpack>
void dot2x4_q_q8_0(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* a, int64_t a_stride, float* out,
                   Unpack unpack_block) {
  const BlockQ8_0* y[4];
  for (int j = 0; j < 4; ++j) y[j] = reinterpret_cast<const BlockQ8_0*>(a + j * a_stride);
  __m256 acc[2][4];
  for (auto& row : acc) for (auto& v : row) v = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n / k_qk; ++i) {
    float dw0, dw1;
    const __m256i qx0 = unpack_block(w, i, &dw0);
    const __m256i qx1 = unpack_block(w + w_stride, i, &dw1);
    const __m256i ax0 = _mm256_sign_epi8(qx0, qx0), ax1 = _mm256_sign_epi8(qx1, qx1);
    for (int j = 0; j < 4; ++j) {
      const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[j][i].qs));
      const float dy = load_fp16(y[j][i].d);
      const __m256 p0 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ax0, _mm256_sign_epi8(qy, qx0)), ones));
      const __m256 p1 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ax1, _mm256_sign_epi8(qy, qx1)), ones));
      acc[0][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw0 * dy), p0, acc[0][j]);
      acc[1][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw1 * dy), p1, acc[1][j]);
    }
  }
  for (int r = 0; r < 2; ++r) for (int j = 0; j < 4; ++j) out[r * 4 + j] = hsum(acc[r][j]);
}

void dot2x4_q8_0(int64_t n, const void* w, int64_t w_stride, const void* a, int64_t a_stride, float* out) {
  dot2x4_q_q8_0(n, static_cast<const uint8_t*>(w), w_stride, static_cast<const uint8_t*>(a), a_stride, out,
                [](const uint8_t* row, int64_t i, float* d) {
                  const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[i];
                  *d = load_fp16(b.d);
                  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
                });
}

void dot2x4_q4_0(int64_t n, const void* w, int64_t w_stride, const void* a, int64_t a_stride, float* out) {
  dot2x4_q_q8_0(n, static_cast<const uint8_t*>(w), w_stride, static_cast<const uint8_t*>(a), a_stride, out,
                [](const uint8_t* row, int64_t i, float* d) {
                  const BlockQ4_0& b = reinterpret_cast<const BlockQ4_0*>(row)[i];
                  *d = load_fp16(b.d);
                  return _mm256_sub_epi8(nibbles_to_bytes(b.qs), _mm256_set1_epi8(8));
                });
}

void dot2x4_mxfp4(int64_t n, const void* w, int64_t w_stride, const void* a, int64_t a_stride, float* out) {
  dot2x4_q_q8_0(n, static_cast<const uint8_t*>(w), w_stride, static_cast<const uint8_t*>(a), a_stride, out,
                [](const uint8_t* row, int64_t i, float* d) {
                  const BlockMxfp4& b = reinterpret_cast<const BlockMxfp4*>(row)[i];
                  *d = mxfp4_half_scale(b.e);
                  return mxfp4_to_bytes(b);
                });
}

// The activation rows of a 4-token call, as Q8_K super-blocks.
struct Q8KRows {
  const BlockQ8_K* rows[4];
  Q8KRows(const void* a, int64_t stride) {
    for (int j = 0; j < 4; ++j) rows[j] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a) + j * stride);
  }
};

// Q4_K against four tokens: each pair of 32-element sub-blocks is unpacked
// once and meets the four activation rows in turn.
void dot4_q4_k(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const Q8KRows y(a, a_stride);
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  float sums[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n / k_qk_k; ++i) {
    uint8_t scales[8], mins[8];
    k_scales_mins(x[i].scales, scales, mins);
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int pair = 0; pair < 4; ++pair) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + pair * 32));
      const __m256i q_lo = _mm256_and_si256(packed, low_mask);
      const __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
      const __m256i s_lo = _mm256_set1_epi16(scales[2 * pair]), s_hi = _mm256_set1_epi16(scales[2 * pair + 1]);
      for (int j = 0; j < 4; ++j) {
        const int8_t* q8 = y.rows[j][i].qs + pair * 64;
        const __m256i p_lo = _mm256_madd_epi16(
            _mm256_maddubs_epi16(q_lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8))), s_lo);
        const __m256i p_hi = _mm256_madd_epi16(
            _mm256_maddubs_epi16(q_hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32))), s_hi);
        acc[j] = _mm256_add_epi32(acc[j], _mm256_add_epi32(p_lo, p_hi));
      }
    }
    const float d = load_fp16(x[i].d), dmin = load_fp16(x[i].dmin);
    for (int j = 0; j < 4; ++j) {
      const BlockQ8_K& b = y.rows[j][i];
      int32_t sum_mins = 0;
      for (int sub = 0; sub < 8; ++sub) sum_mins += mins[sub] * (b.bsums[2 * sub] + b.bsums[2 * sub + 1]);
      sums[j] += b.d * (d * float(hsum_i32(acc[j])) - dmin * float(sum_mins));
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = sums[j];
}

// Q6_K against four tokens: the 6-bit weights of each quarter are rebuilt
// once; the offset of 32 is taken out through each token's sums.
void dot4_q6_k(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const Q8KRows y(a, a_stride);
  float sums[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n / k_qk_k; ++i) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      for (int part = 0; part < 4; ++part) {
        const __m256i q = q6_quarter(l0, l1, h, part);
        const __m256i scale = q6_scale_pair(x[i].scales, half * 8 + part * 2);
        for (int j = 0; j < 4; ++j) {
          const int8_t* q8 = y.rows[j][i].qs + half * 128 + part * 32;
          const __m256i prod = _mm256_maddubs_epi16(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8)));
          acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(prod, scale));
        }
      }
    }
    const float d = load_fp16(x[i].d);
    for (int j = 0; j < 4; ++j) {
      const BlockQ8_K& b = y.rows[j][i];
      int32_t offset = 0;
      for (int sub = 0; sub < 16; ++sub) offset += x[i].scales[sub] * b.bsums[sub];
      sums[j] += d * b.d * float(hsum_i32(acc[j]) - 32 * offset);
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = sums[j];
}

}  // namespace

VecDot2x4Fn vec_dot2x4_avx2(DType weight_type) {
  switch (weight_type) {
    case DType::q8_0: return dot2x4_q8_0;
    case DType::q4_0: return dot2x4_q4_0;
    case DType::mxfp4: return dot2x4_mxfp4;
    case DType::i8: return dot2x4_i8;
    default: return nullptr;
  }
}

VecDot4Fn vec_dot4_avx2(DType weight_type) {
  switch (weight_type) {
    case DType::q8_0: return dot4_q8_0;
    case DType::q4_0: return dot4_q4_0;
    case DType::q4_k: return dot4_q4_k;
    case DType::q6_k: return dot4_q6_k;
    case DType::mxfp4: return dot4_mxfp4;
    case DType::i8: return dot4_i8;
    default: return nullptr;
  }
}

VecDotFn vec_dot_avx2(DType weight_type) {
  switch (weight_type) {
    case DType::q4_0: return dot_q4_0;
    case DType::q4_1: return dot_q4_1;
    case DType::q8_0: return dot_q8_0;
    case DType::q4_k: return dot_q4_k;
    case DType::q6_k: return dot_q6_k;
    case DType::mxfp4: return dot_mxfp4;
    case DType::i8: return dot_i8;
    default: return nullptr;
  }
}

}  // namespace ds
