#include "tensor/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "base/status.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += k_qk) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < k_qk / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + k_qk / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_mxfp4(const BlockMxfp4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += k_qk) {
    const float d = mxfp4_half_scale(x[i].e);
    for (int j = 0; j < k_qk / 2; ++j) {
      y[j] = float(k_mxfp4_values[x[i].qs[j] & 0x0F]) * d;
      y[j + k_qk / 2] = float(k_mxfp4_values[x[i].qs[j] >> 4]) * d;
    }
  }
}

// llama.cpp's quantize_row_mxfp4_ref, byte for byte: the scale 2^(floor(log2
// amax) - 2) (so that amax lands in [4, 8) of the doubled codes), each value
// to the nearest code, the first of equals.
void quantize_mxfp4(const float* x, BlockMxfp4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk) {
    float amax = 0.0f;
    for (int j = 0; j < k_qk; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The same conversion as llama.cpp's (float to uint8 through a 32-bit integer on x86).
    const uint8_t e = amax > 0.0f ? uint8_t(int32_t(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = mxfp4_half_scale(e);
    const auto nearest = [d](float v) {
      int best = 0;
      float best_error = std::fabs(float(k_mxfp4_values[0]) * d - v);
      for (int c = 1; c < 16; ++c) {
        const float error = std::fabs(float(k_mxfp4_values[c]) * d - v);
        if (error < best_error) {
          best = c;
          best_error = error;
        }
      }
      return uint8_t(best);
    };
    y[i].e = e;
    for (int j = 0; j < k_qk / 2; ++j) y[i].qs[j] = uint8_t(nearest(x[j]) | nearest(x[j + k_qk / 2]) << 4);
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += k_qk) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < k_qk / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0x0F) * d + m;
      y[j + k_qk / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

template <typename Block>
uint32_t high_bits(const Block& b) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  return qh;
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += k_qk) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = high_bits(x[i]);
    for (int j = 0; j < k_qk / 2; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = float(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
      y[j + k_qk / 2] = float(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += k_qk) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    const uint32_t qh = high_bits(x[i]);
    for (int j = 0; j < k_qk / 2; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = float((x[i].qs[j] & 0x0F) | h0) * d + m;
      y[j + k_qk / 2] = float((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

template <typename Block>
void dequantize_q8(const Block* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += k_qk) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < k_qk; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += k_qk_k) {
    for (int j = 0; j < k_qk_k; ++j) y[j] = x[i].d * float(x[i].qs[j]);
  }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0, is = 0; j < k_qk_k; j += 64, is += 2, q += 32) {
      uint8_t sc, m;
      k_scale_min(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < k_qk_k; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      k_scale_min(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < k_qk_k; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// Symmetric 8-bit blocks of 32 (Q8_0, and Q8_1 which also stores d * sum).
template <typename Block, bool k_with_sum>
void quantize_q8(const float* x, Block* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk) {
    float amax = 0.0f;
    for (int j = 0; j < k_qk; ++j) amax = std::max(amax, std::fabs(x[j]));
    // Scale by 127 / amax rather than 1 / d, as llama.cpp's quantizers do, so
    // that both round the same values the same way.
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < k_qk; ++j) {
      y[i].qs[j] = int8_t(std::nearbyint(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = fp32_to_fp16(d);
    if constexpr (k_with_sum) y[i].s = fp32_to_fp16(float(sum) * d);
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk_k) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < k_qk_k; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < k_qk_k; ++j) {
      y[i].qs[j] = int8_t(std::min(127, int(std::nearbyint(iscale * x[j]))));
    }
    for (int j = 0; j < k_qk_k / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[j * 16 + l];
      y[i].bsums[j] = int16_t(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

// 4/5-bit blocks (test data only): scale from the extreme value, as ggml's reference.
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < k_qk; ++j) if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
    const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < k_qk / 2; ++j) {
      const uint8_t a = uint8_t(std::min(15, int(x[j] * id + 8.5f)));
      const uint8_t b = uint8_t(std::min(15, int(x[j + k_qk / 2] * id + 8.5f)));
      y[i].qs[j] = a | (b << 4);
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk) {
    float min = x[0], max = x[0];
    for (int j = 1; j < k_qk; ++j) { min = std::min(min, x[j]); max = std::max(max, x[j]); }
    const float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < k_qk / 2; ++j) {
      const uint8_t a = uint8_t(std::min(15, int((x[j] - min) * id + 0.5f)));
      const uint8_t b = uint8_t(std::min(15, int((x[j + k_qk / 2] - min) * id + 0.5f)));
      y[i].qs[j] = a | (b << 4);
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < k_qk; ++j) if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
    const float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < k_qk / 2; ++j) {
      const uint8_t a = uint8_t(std::min(31, int(x[j] * id + 16.5f)));
      const uint8_t b = uint8_t(std::min(31, int(x[j + k_qk / 2] * id + 16.5f)));
      y[i].qs[j] = (a & 0x0F) | ((b & 0x0F) << 4);
      qh |= uint32_t((a & 0x10) >> 4) << j;
      qh |= uint32_t((b & 0x10) >> 4) << (j + k_qk / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += k_qk) {
    float min = x[0], max = x[0];
    for (int j = 1; j < k_qk; ++j) { min = std::min(min, x[j]); max = std::max(max, x[j]); }
    const float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < k_qk / 2; ++j) {
      const uint8_t a = uint8_t(std::min(31, int((x[j] - min) * id + 0.5f)));
      const uint8_t b = uint8_t(std::min(31, int((x[j + k_qk / 2] - min) * id + 0.5f)));
      y[i].qs[j] = (a & 0x0F) | ((b & 0x0F) << 4);
      qh |= uint32_t((a & 0x10) >> 4) << j;
      qh |= uint32_t((b & 0x10) >> 4) << (j + k_qk / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

}  // namespace

float quantize_int8_row(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int64_t i = 0; i < n; ++i) q[i] = int8_t(std::nearbyint(x[i] * id));
  return amax / 127.0f;
}

void quantize_int8_row_static(const float* x, int64_t n, float scale, int8_t* q) {
  const float id = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) q[i] = int8_t(std::clamp(std::nearbyint(x[i] * id), -127.0f, 127.0f));
}

void dequantize_row(DType type, const void* x, float* y, int64_t n) {
  const int64_t nb = n / dtype_traits(type).block_elements;
  switch (type) {
    case DType::f32: std::memcpy(y, x, size_t(n) * 4); return;
    case DType::f16: for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(static_cast<const uint16_t*>(x)[i]); return;
    case DType::bf16: for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(static_cast<const uint16_t*>(x)[i]); return;
    case DType::q4_0: dequantize_q4_0(static_cast<const BlockQ4_0*>(x), y, nb); return;
    case DType::q4_1: dequantize_q4_1(static_cast<const BlockQ4_1*>(x), y, nb); return;
    case DType::q5_0: dequantize_q5_0(static_cast<const BlockQ5_0*>(x), y, nb); return;
    case DType::q5_1: dequantize_q5_1(static_cast<const BlockQ5_1*>(x), y, nb); return;
    case DType::q8_0: dequantize_q8(static_cast<const BlockQ8_0*>(x), y, nb); return;
    case DType::q8_1: dequantize_q8(static_cast<const BlockQ8_1*>(x), y, nb); return;
    case DType::q8_k: dequantize_q8_k(static_cast<const BlockQ8_K*>(x), y, nb); return;
    case DType::q4_k: dequantize_q4_k(static_cast<const BlockQ4_K*>(x), y, nb); return;
    case DType::q5_k: dequantize_q5_k(static_cast<const BlockQ5_K*>(x), y, nb); return;
    case DType::q6_k: dequantize_q6_k(static_cast<const BlockQ6_K*>(x), y, nb); return;
    case DType::mxfp4: dequantize_mxfp4(static_cast<const BlockMxfp4*>(x), y, nb); return;
    default: DS_CHECK(false, std::string("dequantize_row: unsupported type ") + dtype_name(type));
  }
}

bool quantize_row(DType type, const float* x, void* y, int64_t n) {
  const int64_t nb = n / dtype_traits(type).block_elements;
  switch (type) {
    case DType::f32: std::memcpy(y, x, size_t(n) * 4); return true;
    case DType::f16: for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(y)[i] = fp32_to_fp16(x[i]); return true;
    case DType::bf16: for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(y)[i] = fp32_to_bf16(x[i]); return true;
    case DType::q8_0: quantize_q8<BlockQ8_0, false>(x, static_cast<BlockQ8_0*>(y), nb); return true;
    case DType::q8_1: quantize_q8<BlockQ8_1, true>(x, static_cast<BlockQ8_1*>(y), nb); return true;
    case DType::q8_k: quantize_q8_k(x, static_cast<BlockQ8_K*>(y), nb); return true;
    case DType::q4_0: quantize_q4_0(x, static_cast<BlockQ4_0*>(y), nb); return true;
    case DType::q4_1: quantize_q4_1(x, static_cast<BlockQ4_1*>(y), nb); return true;
    case DType::q5_0: quantize_q5_0(x, static_cast<BlockQ5_0*>(y), nb); return true;
    case DType::q5_1: quantize_q5_1(x, static_cast<BlockQ5_1*>(y), nb); return true;
    case DType::mxfp4: quantize_mxfp4(x, static_cast<BlockMxfp4*>(y), nb); return true;
    default: return false;
  }
}

}  // namespace ds
