#pragma once
// Which GGUF tensors a checkpoint becomes, named as llama.cpp's converter
// names them, each with the function that produces its rows as float32 from
// the checkpoint's: one to one for most; Llama's q and k rows permuted into
// GGML's rotary order; DeepSeek's experts stacked into one 3-D tensor per
// projection and layer; DeepSeek's kv_b split per head into k_b (transposed,
// for MLA's absorbed form) and v_b. A tensor the architecture does not have
// is refused by name. Multi-token-prediction layers (past num_hidden_layers)
// are left out, as llama.cpp's converter leaves them.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "hub/hf_checkpoint.h"

namespace ds {

enum class TensorFamily { llama, qwen2, deepseek2 };

struct PlannedTensor {
  std::string name;
  std::string source;          // the checkpoint's shard and tensor it comes from (the first, for stacked experts)
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the row length
  bool vector = false;         // 1-D
  bool experts = false;        // stacked experts (counted per expert in the size label)
  // Fills row r (of rows()) with shape[0] floats.
  std::function<void(int64_t r, float* out)> row;
  // Rows [0, done) are written: their input pages may go.
  std::function<void(int64_t done)> release;
  int64_t rows() const;
  int64_t elements() const { return rows() * shape[0]; }
};

struct PlanSettings {
  TensorFamily family;
  int64_t n_layer = 0, n_head = 0, n_head_kv = 0;
  int64_t n_expert = 0, qk_nope = 0, v_head = 0;  // deepseek2
  bool tied_output = false;                        // no lm_head: the output is the embedding
};

Result<std::vector<PlannedTensor>> plan_tensors(const HfCheckpoint& checkpoint, const PlanSettings& settings);

}  // namespace ds
