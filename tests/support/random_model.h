#pragma once
// Small random-weight decoder models written as GGUF files, for tests that
// need an architecture other than stories260K's, a longer context, or a
// quantized weight type. Weights are drawn so that activations stay O(1).

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace ds {

struct RandomModelShape {
  // "llama", "qwen2" (with q/k/v biases), "deepseek2" (V3-like: q LoRA, MLA
  // with the kv_b layout, a leading dense layer, then DeepSeekMoE with sigmoid
  // gating, a selection bias, 8 experts in 4 groups, 2 used, 1 shared) or
  // "deepseek32" (the same in the split attn_k_b/attn_v_b layout, and a
  // lightning indexer of 8 heads of 64 choosing 8 positions per query), or
  // "deepseek4" (four hyper-connection streams, heads of 64 over a window of
  // 16, layers compressing by 0, 4 (an indexer of 8 heads of 64 picking 8
  // rows), 128, 4, ...; 4 experts, 2 used, the first layer hash-routed).
  std::string arch = "qwen2";
  DType weight_type = DType::f32;
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 128;
  int64_t n_vocab = 300;
  int64_t n_ctx = 4096;
  uint32_t seed = 1;
  // deepseek32 only: one multi-token-prediction layer after the n_layer
  // (blk.{n_layer}: a MoE layer and nextn.eh_proj, enorm, hnorm, shared_head_norm).
  bool nextn = false;
};

// Writes the model under the test temp directory; returns its path.
std::string write_random_model(const RandomModelShape& shape, const std::string& file_name);

}  // namespace ds
