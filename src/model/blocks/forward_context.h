#pragma once
// What the blocks of a layer share during one forward pass, passed to each by
// the model: the backend, the config, the step's trace, and the residual
// stream with the two rows a block reads and writes beside it. Blocks own the
// rest of their workspace.

#include <cstdint>

#include "base/step_trace.h"
#include "device/backend.h"
#include "model/model_config.h"
#include "model/tensor_loader.h"
#include "parallel/collective.h"

namespace ds {

struct ForwardContext {
  Backend& backend;
  const ModelConfig& config;
  StepTrace* trace;  // the step's profiler, or null
  float* x;          // [n, n_embd] the residual stream
  float* h;          // [n, n_embd] a block's normalised input
  float* out;        // [n, n_embd] a block's output, before it joins the stream
  // The ranks of a model split by tensor parallel, whose blocks each give a
  // partial sum of the output; null in one process.
  Collective* collective = nullptr;

  // out = in x w^T for n rows, traced as "matmul TYPE".
  void matmul(const WeightMatrix& w, const float* in, int64_t n, float* out) const;
  // RMS norm of n rows of `dim` elements, `stride` apart, times `weight`.
  void rms_norm(const float* in, const WeightVector& weight, int64_t n, int64_t dim, int64_t stride, float* out) const;
  // The residual stream += a block's output [n, n_embd], traced as "add".
  void residual_add(const float* block_out, int64_t n) const;
  // out [n, n_embd] = the sum of the ranks' partial outputs (Megatron's one
  // all-reduce per block), traced as "all_reduce"; nothing in one process.
  void sum_across_ranks(float* block_out, int64_t n) const;
  // x += block() over n rows, the block reading h = rms_norm(x) * norm and
  // writing out: the pre-norm residual step of Llama's and DeepSeek's layers.
  template <typename Block>
  void pre_norm_residual(const WeightVector& norm, int64_t n, Block&& block) const {
    rms_norm(x, norm, n, config.n_embd, config.n_embd, h);
    block();
    sum_across_ranks(out, n);
    residual_add(out, n);
  }
};

}  // namespace ds
