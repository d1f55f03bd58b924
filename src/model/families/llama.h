#pragma once
// Llama's config and layers, which Qwen2 shares (model/families/qwen2.cpp).

#include <memory>

#include "model/family.h"

namespace ds {

Status read_llama_config(const ConfigReader& reader, ModelConfig& c);
// Tensor parallel: the heads and the FFN's width divided among c.ranks.
Status split_llama_config(ModelConfig& c);
std::vector<BackendOp> llama_layer_ops(const ModelConfig& c);
// qkv_biases_required: attn_{q,k,v}.bias must be present (Qwen2); else they are used where present.
Result<std::unique_ptr<LayerStack>> make_llama_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend,
                                                      bool qkv_biases_required);

}  // namespace ds
