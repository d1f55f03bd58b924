#include "kernels/vec_dot.h"

#include "base/status.h"
#include "kernels/cpu_features.h"

namespace ds {

DType activation_type_for(DType weight_type) {
  switch (weight_type) {
    case DType::f32: return DType::f32;
    case DType::f16: return DType::f16;
    case DType::bf16: return DType::bf16;
    case DType::q4_0:
    case DType::q5_0:
    case DType::q8_0: return DType::q8_0;
    case DType::q4_1:
    case DType::q5_1: return DType::q8_1;
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k: return DType::q8_k;
    case DType::i8: return DType::i8;  // W8A8: per-token int8 rows with their scales (matmul.cpp)
    default: DS_CHECK(false, std::string("no matmul for weight type ") + dtype_name(weight_type));
  }
  return DType::f32;
}

VecDotKernel vec_dot_kernel(DType weight_type) {
  VecDotFn fn = use_avx2_kernels() ? vec_dot_avx2(weight_type) : nullptr;
  if (!fn) fn = vec_dot_portable(weight_type);
  DS_CHECK(fn != nullptr, std::string("no vec_dot for ") + dtype_name(weight_type));
  if (!use_avx2_kernels()) return {activation_type_for(weight_type), fn, nullptr, nullptr};
  return {activation_type_for(weight_type), fn, vec_dot4_avx2(weight_type), vec_dot2x4_avx2(weight_type)};
}

}  // namespace ds
