#pragma once
// Dot products between one weight row and one activation row, the inner loop
// of every matrix multiply. As in llama.cpp, each weight type pairs with an
// activation type (activations are converted once per matmul): F32 with F32,
// F16 with F16, BF16 with BF16, Q4_0/Q5_0/Q8_0 with Q8_0, Q4_1/Q5_1 with Q8_1,
// and the K types with Q8_K. Integer products are exact; only the per-block
// scaling is floating point.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// Returns sum_i w[i] * a[i] over n elements (n a multiple of the block size).
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

struct VecDotKernel {
  DType activation_type;
  VecDotFn dot;
};

// The activation type a weight type multiplies with.
DType activation_type_for(DType weight_type);

// The fastest kernel this CPU runs for a supported weight type.
VecDotKernel vec_dot_kernel(DType weight_type);

// Per-ISA tables; nullptr where an ISA has no specialised kernel for a type.
VecDotFn vec_dot_portable(DType weight_type);
VecDotFn vec_dot_avx2(DType weight_type);

}  // namespace ds
