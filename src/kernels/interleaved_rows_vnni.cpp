// Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, MXFP4 and I8 tile kernels over interleaved
// rows (interleaved_tiles_x86.h) with AVX-512 VNNI's dpbusd on 256-bit
// registers (AVX512_VNNI + AVX512VL): four u8 x s8 products added into each
// int32 lane in one instruction, where AVX2 takes
// maddubs, madd and an add. The sums are exact either way, so the outputs
// equal the AVX2 kernels' bit for bit (tested). Compiled with those flags;
// only called when cpu_features() reports them.

#include <immintrin.h>

#include "kernels/interleaved_tiles_x86.h"

namespace ds {
namespace {

// The K types stay on AVX2's tiles: summed per sub-block in int32 and then
// scaled with vpmulld, they measured no faster than maddubs' int16 pairs.
struct VnniDot {
  static constexpr bool k_biased = true;
  static constexpr int k_registers = 32;
  static __m256i add4(__m256i sums, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(sums, u, s); }
  static __m256i add_chunk(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static __m256i to_int32(__m256i acc) { return acc; }
};

}  // namespace

InterleavedGroupFn interleaved_kernel_vnni(DType type) {
  switch (type) {
    case DType::q8_0: return int8_group_kernel<DType::q8_0, VnniDot>();
    case DType::q4_0: return group_nibbles<GroupQ4_0, VnniDot>;
    case DType::q5_0: return group_nibbles<GroupQ5_0, VnniDot>;
    case DType::q4_1: return group_nibbles<GroupQ4_1, VnniDot>;
    case DType::q5_1: return group_nibbles<GroupQ5_1, VnniDot>;
    case DType::mxfp4: return group_mxfp4<VnniDot>;
    case DType::i8: return int8_group_kernel<DType::i8, VnniDot>();
    default: return nullptr;
  }
}

bool interleaved_kernel_vnni_biased(DType type) { return VnniDot::k_biased && (type == DType::q8_0 || type == DType::i8); }

}  // namespace ds
