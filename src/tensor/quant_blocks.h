#pragma once
// Byte layouts of the GGUF block-quantized types (identical to ggml's, since
// the weights are used in place from the file).

#include <cstdint>

namespace ds {

constexpr int k_qk = 32;    // elements per block of the *_0 / *_1 types
constexpr int k_qk_k = 256; // elements per super-block of the K types
constexpr int k_scale_bytes_k = 12;

struct BlockQ4_0 { uint16_t d; uint8_t qs[k_qk / 2]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[k_qk / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[k_qk / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[k_qk / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[k_qk]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[k_qk]; };  // s = d * sum(qs)
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[k_scale_bytes_k]; uint8_t qs[k_qk_k / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[k_scale_bytes_k]; uint8_t qh[k_qk_k / 8]; uint8_t qs[k_qk_k / 2]; };
struct BlockQ6_K { uint8_t ql[k_qk_k / 2]; uint8_t qh[k_qk_k / 4]; int8_t scales[k_qk_k / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[k_qk_k]; int16_t bsums[k_qk_k / 16]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 &&
              sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 &&
              sizeof(BlockQ8_K) == 292, "block layouts must match GGUF");

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block.
inline void k_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace ds
