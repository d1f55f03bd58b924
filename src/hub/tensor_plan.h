#pragma once
// Which GGUF tensors a checkpoint becomes, named as llama.cpp's converter
// names them, each with the function that produces its rows as float32 from
// the checkpoint's: one to one for most; Llama's q and k rows permuted into
// GGML's rotary order; DeepSeek's experts stacked into one 3-D tensor per
// projection and layer; DeepSeek's kv_b split per head into k_b (transposed,
// for MLA's absorbed form) and v_b; DeepSeek-V3.2's lightning indexer beside
// them. A tensor the architecture does not have is refused by name.
// Multi-token-prediction layers (past num_hidden_layers) are left out of
// deepseek2, which has no place for them, and kept in deepseek32 as blocks
// after the others with their nextn tensors, as llama.cpp's converter does. DeepSeek-V4's plan
// (deepseek4_tensor_plan.cpp) names its tensors as DeepSeek's own code does
// and keeps each tensor's source type, as llama.cpp's converter does for it:
// FP8 to Q8_0, BF16 and F32 kept, FP4 experts to MXFP4 bit for bit.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "hub/hf_checkpoint.h"
#include "tensor/dtype.h"

namespace ds {

enum class TensorFamily { llama, qwen2, deepseek2, deepseek32, deepseek4 };

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
  // The type written whatever --type says (V4's, from its source's), or none for --type's rules.
  std::optional<DType> type;
  // Where set, fills row r's bytes in `type` directly, bits copied (MXFP4 experts, I32 tables), instead of `row`.
  std::function<void(int64_t r, uint8_t* out)> raw_row;
  int64_t rows() const;
  int64_t elements() const { return rows() * shape[0]; }
};

struct PlanSettings {
  TensorFamily family;
  int64_t n_layer = 0, n_head = 0, n_head_kv = 0;
  int64_t n_expert = 0, qk_nope = 0, v_head = 0;  // deepseek2 and deepseek32 (n_expert deepseek4 too)
  int64_t n_nextn_layers = 0;                      // deepseek32: multi-token-prediction layers kept after the others
  int64_t n_hash_layers = 0;                       // deepseek4
  bool tied_output = false;                        // no lm_head: the output is the embedding
};

Result<std::vector<PlannedTensor>> plan_tensors(const HfCheckpoint& checkpoint, const PlanSettings& settings);

// The pieces the families' plans share.
// A tensor's rows as they are (a 1-D tensor is one row).
PlannedTensor one_to_one(const std::string& name, const HfCheckpoint::RowReader& reader, bool vector);
// A float (or FP8) tensor's rows; a tensor stored otherwise is refused by name.
Result<HfCheckpoint::RowReader> float_rows(const HfCheckpoint& checkpoint, const std::string& name);
// The routed experts' tensors: by layer and projection, then expert -> tensor name.
using ExpertTensors = std::map<std::pair<int64_t, std::string>, std::map<int64_t, std::string>>;
// Each layer's experts of each projection stacked as [n_expert][rows][columns] into blk.N.{names[projection]}
// (every expert there, all of one shape); as MXFP4 blocks copied bit for bit where `mxfp4`, else as float rows.
Status add_stacked_experts(const HfCheckpoint& checkpoint, const ExpertTensors& experts, const std::map<std::string, std::string>& names,
                           int64_t n_expert, bool mxfp4, std::vector<PlannedTensor>* plan);
Result<std::vector<PlannedTensor>> plan_deepseek4_tensors(const HfCheckpoint& checkpoint, const PlanSettings& settings);

}  // namespace ds
