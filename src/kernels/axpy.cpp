#include "kernels/axpy.h"

#include "base/fp16.h"
#include "base/status.h"
#include "kernels/cpu_features.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

void axpy_f32(int64_t n, float alpha, const void* x, float* y) {
  const auto* v = static_cast<const float*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * v[i];
}

void axpy_f16(int64_t n, float alpha, const void* x, float* y) {
  const auto* v = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * fp16_to_fp32(v[i]);
}

void axpy_q8_0(int64_t n, float alpha, const void* x, float* y) {
  const auto* blocks = static_cast<const BlockQ8_0*>(x);
  for (int64_t b = 0; b < n / k_qk; ++b) {
    const float scale = alpha * fp16_to_fp32(blocks[b].d);
    for (int64_t i = 0; i < k_qk; ++i) y[b * k_qk + i] += scale * float(blocks[b].qs[i]);
  }
}

}  // namespace

AxpyFn axpy_portable(DType x_type) {
  switch (x_type) {
    case DType::f32: return axpy_f32;
    case DType::f16: return axpy_f16;
    case DType::q8_0: return axpy_q8_0;
    default: DS_CHECK(false, "axpy takes f32, f16 or q8_0");
  }
  return nullptr;
}

AxpyFn axpy_kernel(DType x_type) {
  AxpyFn fn = use_avx2_kernels() ? axpy_avx2(x_type) : nullptr;
  return fn ? fn : axpy_portable(x_type);
}

}  // namespace ds
