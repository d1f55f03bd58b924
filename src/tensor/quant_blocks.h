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
// MXFP4 (OCP microscaling): 32 E2M1 codes under one E8M0 scale, nibbles laid
// out as Q4_0's (the low ones elements 0-15, the high ones 16-31).
struct BlockMxfp4 { uint8_t e; uint8_t qs[k_qk / 2]; };

// E2M1's values doubled, so that they are integers (0, 0.5, 1, 1.5, 2, 3, 4, 6
// and their negatives), as ggml keeps them; the block scale is halved to match.
constexpr int8_t k_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 127) / 2, exactly (subnormal for e < 2).
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 &&
              sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 &&
              sizeof(BlockQ8_K) == 292 && sizeof(BlockMxfp4) == 17, "block layouts must match GGUF");

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

// Q6_K's unsigned 6-bit codes (the stored value + 32) in element order, and
// back. Each 128 elements: the low nibbles of 0-31 and 64-95 share ql[0..32),
// of 32-63 and 96-127 ql[32..64); their top two bits fill qh[0..32).
inline void q6_k_codes(const BlockQ6_K& b, uint8_t* codes) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    uint8_t* v = codes + 128 * h;
    for (int l = 0; l < 32; ++l) {
      v[l] = uint8_t((ql[l] & 0xF) | ((qh[l] & 3) << 4));
      v[l + 32] = uint8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      v[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      v[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

inline void q6_k_pack_codes(const uint8_t* codes, BlockQ6_K& b) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* v = codes + 128 * h;
    uint8_t* ql = b.ql + 64 * h;
    uint8_t* qh = b.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = uint8_t((v[l] & 0xF) | ((v[l + 64] & 0xF) << 4));
      ql[l + 32] = uint8_t((v[l + 32] & 0xF) | ((v[l + 96] & 0xF) << 4));
      qh[l] = uint8_t((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace ds
