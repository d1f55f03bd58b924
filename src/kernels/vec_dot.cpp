#include "kernels/vec_dot.h"

#include "base/status.h"
#include "kernels/cpu_features.h"

namespace ds {

VecDotKernel vec_dot_kernel(DType weight_type) {
  VecDotFn fn = use_avx2_kernels() ? vec_dot_avx2(weight_type) : nullptr;
  if (!fn) fn = vec_dot_portable(weight_type);
  DS_CHECK(fn != nullptr, std::string("no vec_dot for ") + dtype_name(weight_type));
  if (!use_avx2_kernels()) return {activation_type_for(weight_type), fn, nullptr, nullptr};
  return {activation_type_for(weight_type), fn, vec_dot4_avx2(weight_type), vec_dot2x4_avx2(weight_type)};
}

}  // namespace ds
