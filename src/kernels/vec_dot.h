#pragma once
// Dot products between one weight row and one activation row, the inner loop
// of every matrix multiply. As in llama.cpp, each weight type pairs with an
// activation type (activations are converted once per matmul): F32 with F32,
// F16 with F16, BF16 with BF16, Q4_0/Q5_0/Q8_0 with Q8_0, Q4_1/Q5_1 with Q8_1,
// the K types with Q8_K, and I8 (W8A8's per-output-channel weights) with
// per-token I8 rows, whose dot is the exact int32 sum (the row and token
// scales multiply outside). Integer products are exact; only the per-block
// scaling is floating point.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// Returns sum_i w[i] * a[i] over n elements (n a multiple of the block size).
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

// out[j] = dot of w with the activation row at a + j * a_stride_bytes, j < 4:
// one pass over the weight row serves four tokens (prefill, batched decode).
using VecDot4Fn = void (*)(int64_t n, const void* w, const void* a, int64_t a_stride_bytes, float* out);

// out[r * 4 + j] for weight rows w + r * w_stride_bytes (r < 2) and activation
// rows a + j * a_stride_bytes (j < 4): a register tile for prefill.
using VecDot2x4Fn = void (*)(int64_t n, const void* w, int64_t w_stride_bytes, const void* a, int64_t a_stride_bytes,
                             float* out);

struct VecDotKernel {
  DType activation_type;
  VecDotFn dot;
  VecDot4Fn dot4;      // nullptr: call dot four times
  VecDot2x4Fn dot2x4;  // nullptr: call dot4 twice
};

// The fastest kernel this CPU runs for a supported weight type.
VecDotKernel vec_dot_kernel(DType weight_type);

// Per-ISA tables; nullptr where an ISA has no specialised kernel for a type.
VecDotFn vec_dot_portable(DType weight_type);
VecDotFn vec_dot_avx2(DType weight_type);
VecDot4Fn vec_dot4_avx2(DType weight_type);
VecDot2x4Fn vec_dot2x4_avx2(DType weight_type);

}  // namespace ds
