#include "kernels/activation_quant.h"

#include "kernels/cpu_features.h"
#include "tensor/quantize.h"

namespace ds {

void quantize_activations(DType type, const float* x, void* out, int64_t n) {
  if (use_avx2_kernels() && type == DType::q8_0) return quantize_q8_0_avx2(x, out, n);
  if (use_avx2_kernels() && type == DType::q8_k) return quantize_q8_k_avx2(x, out, n);
  if (use_avx2_kernels() && type == DType::f16) return convert_f16_avx2(x, out, n);
  if (use_avx2_kernels() && type == DType::bf16) return convert_bf16_avx2(x, out, n);
  quantize_row(type, x, out, n);
}

float quantize_int8_activations(const float* x, int8_t* out, int64_t n, float static_scale) {
  if (static_scale > 0.0f) {
    if (use_avx2_kernels()) quantize_int8_row_static_avx2(x, out, n, static_scale);
    else quantize_int8_row_static(x, n, static_scale, out);
    return static_scale;
  }
  return use_avx2_kernels() ? quantize_int8_row_avx2(x, out, n) : quantize_int8_row(x, n, out);
}

}  // namespace ds
