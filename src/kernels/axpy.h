#pragma once
// y[0..n) += alpha * x[0..n) for an f32 accumulator and x in f32, f16 or
// q8_0 (n a multiple of 32): the value accumulation of attention.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

using AxpyFn = void (*)(int64_t n, float alpha, const void* x, float* y);

// The fastest implementation this CPU runs for x of type f32, f16 or q8_0.
AxpyFn axpy_kernel(DType x_type);

AxpyFn axpy_portable(DType x_type);
AxpyFn axpy_avx2(DType x_type);

}  // namespace ds
