#include "model/blocks/forward_context.h"

namespace ds {

void ForwardContext::matmul(const WeightMatrix& w, const float* in, int64_t n, float* result) const {
  TraceScope scope(trace, "matmul", dtype_name(w.type));
  backend.matmul(w, in, n, result);
}

void ForwardContext::rms_norm(const float* in, const WeightVector& weight, int64_t n, int64_t dim, int64_t stride,
                              float* result) const {
  TraceScope scope(trace, "rms_norm");
  backend.rms_norm(in, stride, weight.data, config.norm_eps, n, dim, result, stride);
}

void ForwardContext::sum_across_ranks(float* block_out, int64_t n) const {
  if (!collective) return;
  TraceScope scope(trace, "all_reduce");
  collective->all_reduce_sum(block_out, n * config.n_embd);
}

void ForwardContext::residual_add(const float* block_out, int64_t n) const {
  TraceScope scope(trace, "add");
  backend.add(x, block_out, n * config.n_embd);
}

}  // namespace ds
