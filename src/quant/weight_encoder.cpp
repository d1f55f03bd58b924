#include "quant/weight_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

int clamp_round(float v, int lo, int hi) { return std::clamp(int(std::nearbyint(v)), lo, hi); }

// x[0..n) ~ scale * q - offset with q in [0, levels], scale >= 0, offset >= 0
// (a sub-block whose values are all positive still starts at zero, as in ggml).
void fit_scale_offset(const float* x, int n, int levels, float* scale, float* offset) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  *scale = 0.0f;
  *offset = -lo;
  if (hi <= lo) return;
  double best = INFINITY;
  for (int step = -5; step <= 15; ++step) {
    const float s0 = (hi - lo) / (float(levels) + 0.1f * float(step));
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    int q[32];
    for (int i = 0; i < n; ++i) {
      q[i] = clamp_round((x[i] - lo) / s0, 0, levels);
      sq += q[i], sqq += double(q[i]) * q[i], sx += x[i], sqx += double(q[i]) * x[i];
    }
    // Least squares for x ~ s q + b; b must stay <= 0.
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double s = (n * sqx - sq * sx) / det, b = (sqq * sx - sq * sqx) / det;
    if (b > 0) b = 0, s = sqx / sqq;
    if (s <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] + b - x[i];
      err += e * e;
    }
    if (err < best) best = err, *scale = float(s), *offset = float(-b);
  }
}

// x[0..n) ~ scale * q with q in [-32, 31], scale >= 0.
float fit_symmetric_scale(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax == 0.0f) return 0.0f;
  double best = INFINITY;
  float best_scale = amax / 31.0f;
  for (int step = -8; step <= 8; ++step) {
    const float s0 = amax / (31.5f + 0.25f * float(step));
    double sqq = 0, sqx = 0;
    int q[16];
    for (int i = 0; i < n; ++i) {
      q[i] = clamp_round(x[i] / s0, -32, 31);
      sqq += double(q[i]) * q[i], sqx += double(q[i]) * x[i];
    }
    if (sqq == 0) continue;
    const double s = sqx / sqq;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] - x[i];
      err += e * e;
    }
    if (s > 0 && err < best) best = err, best_scale = float(s);
  }
  return best_scale;
}

// The eight sub-block scales and offsets of a Q4_K / Q5_K super-block as
// 6-bit multiples of d and dmin; returns the values' codes in q[256].
template <typename Block>
void encode_scale_offset_block(const float* x, int levels, Block& b, uint8_t* q) {
  float scales[8], offsets[8];
  for (int j = 0; j < 8; ++j) fit_scale_offset(x + 32 * j, 32, levels, &scales[j], &offsets[j]);
  const float max_scale = *std::max_element(scales, scales + 8), max_offset = *std::max_element(offsets, offsets + 8);
  b.d = fp32_to_fp16(max_scale / 63.0f);
  b.dmin = fp32_to_fp16(max_offset / 63.0f);
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = uint8_t(d > 0 ? clamp_round(scales[j] / d, 0, 63) : 0);
    mn[j] = uint8_t(dmin > 0 ? clamp_round(offsets[j] / dmin, 0, 63) : 0);
  }
  // The inverse of k_scale_min: sub-blocks 0-3 in the low six bits of bytes
  // 0-3 (scales) and 4-7 (mins); 4-7 split into low nibbles in bytes 8-11
  // and their top two bits in bits 6-7 of bytes 0-7.
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    const float step = d * float(sc[j]), zero = dmin * float(mn[j]);
    for (int i = 0; i < 32; ++i) q[32 * j + i] = uint8_t(step > 0 ? clamp_round((x[32 * j + i] + zero) / step, 0, levels) : 0);
  }
}

// ggml's quantize_row_q8_0_ref.
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk) {
    float amax = 0.0f;
    for (int j = 0; j < k_qk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < k_qk; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk_k) {
    uint8_t q[k_qk_k];
    encode_scale_offset_block(x, 15, y[i], q);
    // Each 64 values: the first 32 in the low nibbles, the next 32 in the high ones.
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) y[i].qs[32 * c + l] = uint8_t(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk_k) {
    uint8_t q[k_qk_k];
    encode_scale_offset_block(x, 31, y[i], q);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t a = q[64 * c + l], b = q[64 * c + 32 + l];
        y[i].qs[32 * c + l] = uint8_t((a & 0xF) | ((b & 0xF) << 4));
        y[i].qh[l] |= uint8_t(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk_k) {
    float scales[16];
    for (int j = 0; j < 16; ++j) scales[j] = fit_symmetric_scale(x + 16 * j, 16);
    y[i].d = fp32_to_fp16(*std::max_element(scales, scales + 16) / 127.0f);
    const float d = fp16_to_fp32(y[i].d);
    uint8_t codes[k_qk_k];
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = int8_t(d > 0 ? clamp_round(scales[j] / d, 0, 127) : 0);
      const float step = d * float(y[i].scales[j]);
      for (int l = 0; l < 16; ++l) codes[16 * j + l] = uint8_t((step > 0 ? clamp_round(x[16 * j + l] / step, -32, 31) : 0) + 32);
    }
    q6_k_pack_codes(codes, y[i]);
  }
}

}  // namespace

float quantize_int8_row_asymmetric(const float* x, int64_t n, int8_t* q, int32_t* zero_point) {
  // The range holds zero, so that the zero point is a code ([-127, 127]).
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  *zero_point = 0;
  if (hi == lo) return quantize_int8_row(x, n, q);  // a constant row: symmetric holds it exactly
  const float scale = (hi - lo) / 254.0f, id = 1.0f / scale;
  *zero_point = std::clamp(int32_t(std::nearbyint(-127.0f - lo * id)), -127, 127);
  for (int64_t i = 0; i < n; ++i) q[i] = int8_t(std::clamp(int32_t(std::nearbyint(x[i] * id)) + *zero_point, -127, 127));
  return scale;
}

bool quantize_weight_row(DType type, const float* x, void* y, int64_t n) {
  const int64_t nb = n / k_qk_k;
  switch (type) {
    case DType::q8_0: quantize_q8_0(x, static_cast<BlockQ8_0*>(y), n / k_qk); return true;
    case DType::q4_k: quantize_q4_k(x, static_cast<BlockQ4_K*>(y), nb); return true;
    case DType::q5_k: quantize_q5_k(x, static_cast<BlockQ5_K*>(y), nb); return true;
    case DType::q6_k: quantize_q6_k(x, static_cast<BlockQ6_K*>(y), nb); return true;
    case DType::f32: case DType::f16: case DType::bf16: case DType::q4_0: case DType::q4_1: case DType::q5_0: case DType::q5_1:
    case DType::mxfp4:
      return quantize_row(type, x, y, n);  // ggml's reference rounding already
    default: return false;
  }
}

}  // namespace ds
