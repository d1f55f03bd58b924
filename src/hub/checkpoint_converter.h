#pragma once
// `dsinfer convert`: a Hugging Face checkpoint (hf_checkpoint.h) to one GGUF
// file with the tensor names, metadata keys and tokenizer fields llama.cpp's
// convert_hf_to_gguf.py writes, so that either engine loads the other's
// output. Architectures: LlamaForCausalLM (llama), Qwen2ForCausalLM (qwen2),
// DeepseekV2ForCausalLM and DeepseekV3ForCausalLM (deepseek2),
// DeepseekV32ForCausalLM (deepseek32: the indexer, the MTP layers kept),
// DeepseekV4ForCausalLM (deepseek4: FP8 matrices to Q8_0 and FP4 experts to
// MXFP4 whatever --type says, as llama.cpp's converter writes V4); which
// tensors each becomes is tensor_plan.h's. Every config.json key is honoured, known
// not to change the math, or refused by name.
//
// Streaming: a tensor is converted row by row from the mapped shards into its
// output bytes, which are written before the next tensor is read, and the
// shard's pages are released after each tensor: memory stays near the
// largest output tensor plus the largest input tensor. The file is written
// under a temporary name and renamed when complete.

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ds {

struct ConvertOptions {
  std::string dir, out;
  std::string name;  // general.name; "" for the directory's name
  DType type = DType::f16;  // f32, f16, bf16 or q8_0, for the weight matrices (vectors and norms stay f32)
};

struct ConvertProgress {
  std::function<void(int64_t total_bytes)> started;
  std::function<void(int64_t done_bytes)> progress;
};

Status convert_checkpoint(const ConvertOptions& options, const ConvertProgress& progress);

}  // namespace ds
