#include "kernels/axpy.h"

#include "base/fp16.h"
#include "base/status.h"
#include "kernels/cpu_features.h"

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

}  // namespace

AxpyFn axpy_portable(DType x_type) {
  DS_CHECK(x_type == DType::f32 || x_type == DType::f16, "axpy takes f32 or f16");
  return x_type == DType::f32 ? axpy_f32 : axpy_f16;
}

AxpyFn axpy_kernel(DType x_type) {
  AxpyFn fn = use_avx2_kernels() ? axpy_avx2(x_type) : nullptr;
  return fn ? fn : axpy_portable(x_type);
}

}  // namespace ds
