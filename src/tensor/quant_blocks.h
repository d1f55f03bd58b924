#pragma once
// Byte layouts of the GGUF block-quantized types (identical to ggml's, since
// the weights are used in place from the file).

#include <cstdint>
#include <cstring>

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

// All eight scales and mins of a Q4_K / Q5_K super-block at once (the same
// values as k_scale_min, four bytes per 32-bit operation).
inline void k_scales_mins(const uint8_t* q, uint8_t* scales, uint8_t* mins) {
  uint32_t packed[3];
  std::memcpy(packed, q, sizeof(packed));
  const uint32_t low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, top2 = 0x03030303u;
  const uint32_t scales_0_3 = packed[0] & low6;
  const uint32_t mins_0_3 = packed[1] & low6;
  const uint32_t scales_4_7 = (packed[2] & low4) | (((packed[0] >> 6) & top2) << 4);
  const uint32_t mins_4_7 = ((packed[2] >> 4) & low4) | (((packed[1] >> 6) & top2) << 4);
  std::memcpy(scales, &scales_0_3, 4);
  std::memcpy(scales + 4, &scales_4_7, 4);
  std::memcpy(mins, &mins_0_3, 4);
  std::memcpy(mins + 4, &mins_4_7, 4);
}

}  // namespace ds
