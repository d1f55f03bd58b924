// Portable dot products: the integer formulation of each quantized type, with
// several independent accumulators so the compiler can vectorise them.

#include <cstring>

#include "base/fp16.h"
#include "kernels/vec_dot.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

template <typename Convert, typename T>
float dot_plain(int64_t n, const T* w, const T* a, Convert convert) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += convert(w[i + j]) * convert(a[i + j]);
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += convert(w[i]) * convert(a[i]);
  for (float v : acc) sum += v;
  return sum;
}

// W8A8: the exact int32 sum of int8 products (the scales multiply afterwards).
float dot_i8(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const int8_t*>(w);
  const auto* y = static_cast<const int8_t*>(a);
  int32_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += int32_t(x[i]) * int32_t(y[i]);
  return float(sum);
}

float dot_f32(int64_t n, const void* w, const void* a) {
  return dot_plain(n, static_cast<const float*>(w), static_cast<const float*>(a), [](float v) { return v; });
}
float dot_f16(int64_t n, const void* w, const void* a) {
  return dot_plain(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), fp16_to_fp32);
}
float dot_bf16(int64_t n, const void* w, const void* a) {
  return dot_plain(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), bf16_to_fp32);
}

// Unpacks the 32 weights of a 4/5-bit block into signed or unsigned bytes.
void unpack_q4_0(const BlockQ4_0& b, int8_t* q) {
  for (int j = 0; j < 16; ++j) { q[j] = int8_t((b.qs[j] & 0xF) - 8); q[j + 16] = int8_t((b.qs[j] >> 4) - 8); }
}
void unpack_q4_1(const BlockQ4_1& b, int8_t* q) {
  for (int j = 0; j < 16; ++j) { q[j] = int8_t(b.qs[j] & 0xF); q[j + 16] = int8_t(b.qs[j] >> 4); }
}
template <typename Block>
void unpack_q5(const Block& b, int8_t* q, int offset) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t(((b.qs[j] & 0xF) | (((qh >> j) << 4) & 0x10)) - offset);
    q[j + 16] = int8_t(((b.qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - offset);
  }
}

int32_t dot_i8_32(const int8_t* x, const int8_t* y) {
  int32_t sum = 0;
  for (int j = 0; j < 32; ++j) sum += int32_t(x[j]) * int32_t(y[j]);
  return sum;
}

// MXFP4 against Q8_0: the codes' doubled values (exact integers) times the
// activations, scaled by the halved E8M0 scale as llama.cpp scales them.
float dot_mxfp4(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / k_qk; ++i) {
    for (int j = 0; j < 16; ++j) {
      q[j] = k_mxfp4_values[x[i].qs[j] & 0xF];
      q[j + 16] = k_mxfp4_values[x[i].qs[j] >> 4];
    }
    sum += float(dot_i8_32(q, y[i].qs)) * mxfp4_half_scale(x[i].e) * fp16_to_fp32(y[i].d);
  }
  return sum;
}

template <typename WBlock, void (*k_unpack)(const WBlock&, int8_t*)>
float dot_q_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const WBlock*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / k_qk; ++i) {
    k_unpack(x[i], q);
    sum += float(dot_i8_32(q, y[i].qs)) * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
  }
  return sum;
}

template <typename WBlock, void (*k_unpack)(const WBlock&, int8_t*)>
float dot_q_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const WBlock*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / k_qk; ++i) {
    k_unpack(x[i], q);
    sum += float(dot_i8_32(q, y[i].qs)) * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

void unpack_q8_0(const BlockQ8_0& b, int8_t* q) { std::memcpy(q, b.qs, 32); }
void unpack_q5_0(const BlockQ5_0& b, int8_t* q) { unpack_q5(b, q, 16); }
void unpack_q5_1(const BlockQ5_1& b, int8_t* q) { unpack_q5(b, q, 0); }

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; the mins term
// uses the activation's per-16 sums.
template <typename Block, bool k_has_high_bit>
float dot_q45_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / k_qk_k; ++i) {
    int32_t sum_scaled = 0, sum_mins = 0;
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t scale, min;
      k_scale_min(sub, x[i].scales, &scale, &min);
      const uint8_t* qs = x[i].qs + (sub / 2) * 32;
      const int shift = (sub & 1) * 4;
      const int8_t* q8 = y[i].qs + sub * 32;
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) {
        int v = (qs[l] >> shift) & 0xF;
        if constexpr (k_has_high_bit) v |= ((x[i].qh[l] >> sub) & 1) << 4;
        dot += v * q8[l];
      }
      sum_scaled += dot * scale;
      sum_mins += min * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
    }
    sum += y[i].d * (fp16_to_fp32(x[i].d) * float(sum_scaled) - fp16_to_fp32(x[i].dmin) * float(sum_mins));
  }
  return sum;
}

float dot_q6_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / k_qk_k; ++i) {
    int8_t q[k_qk_k];
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32) {
      int8_t* out = q + half * 128;
      for (int l = 0; l < 32; ++l) {
        out[l] = int8_t(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        out[l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        out[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        out[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int32_t total = 0;
    for (int sub = 0; sub < 16; ++sub) {
      int32_t dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[sub * 16 + l] * y[i].qs[sub * 16 + l];
      total += dot * x[i].scales[sub];
    }
    sum += fp16_to_fp32(x[i].d) * y[i].d * float(total);
  }
  return sum;
}

}  // namespace

VecDotFn vec_dot_portable(DType weight_type) {
  switch (weight_type) {
    case DType::f32: return dot_f32;
    case DType::i8: return dot_i8;
    case DType::f16: return dot_f16;
    case DType::bf16: return dot_bf16;
    case DType::q4_0: return dot_q_q8_0<BlockQ4_0, unpack_q4_0>;
    case DType::q5_0: return dot_q_q8_0<BlockQ5_0, unpack_q5_0>;
    case DType::q8_0: return dot_q_q8_0<BlockQ8_0, unpack_q8_0>;
    case DType::q4_1: return dot_q_q8_1<BlockQ4_1, unpack_q4_1>;
    case DType::q5_1: return dot_q_q8_1<BlockQ5_1, unpack_q5_1>;
    case DType::q4_k: return dot_q45_k<BlockQ4_K, false>;
    case DType::q5_k: return dot_q45_k<BlockQ5_K, true>;
    case DType::q6_k: return dot_q6_k;
    case DType::mxfp4: return dot_mxfp4;
    default: return nullptr;
  }
}

}  // namespace ds
