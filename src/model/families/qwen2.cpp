// Qwen2 (and the R1-distill models built on it): Llama's layers with biases
// on the q, k and v projections, and RoPE over the two halves of each head
// (NeoX), as the converter leaves q and k unpermuted.

#include "model/families/llama.h"

namespace ds {
namespace {

Result<std::unique_ptr<LayerStack>> make_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend) {
  return make_llama_layers(c, options, backend, /*qkv_biases_required=*/true);
}

}  // namespace

const Family& qwen2_family() {
  static const Family family{"qwen2", RopeLayout::neox, read_llama_config, make_layers, llama_layer_ops, split_llama_config};
  return family;
}

}  // namespace ds
