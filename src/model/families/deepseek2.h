#pragma once
// DeepSeek-V2/V3's config and layers, which DeepSeek-V3.2 extends with its
// indexer (model/families/deepseek32.cpp).

#include <memory>
#include <vector>

#include "model/blocks/gated_ffn.h"
#include "model/blocks/mla_attention.h"
#include "model/blocks/moe_ffn.h"
#include "model/family.h"

namespace ds {

// The MLA and MoE keys.
Status read_deepseek2_config(const ConfigReader& reader, ModelConfig& c);
// Tensor parallel: the attention heads, the dense FFN and every expert divided among c.ranks.
Status split_deepseek2_config(ModelConfig& c);
std::vector<BackendOp> deepseek2_layer_ops(const ModelConfig& c);

class Deepseek2Layers : public LayerStack {
 public:
  // mla_prefill: the MLA form of prompt chunks (ModelOptions::mla_prefill).
  Deepseek2Layers(const ModelConfig& c, MlaPrefill mla_prefill, Backend& backend)
      : config_(c), backend_(backend), layers_(size_t(c.n_layer)), attention_(c, mla_prefill) {}

  Status load(TensorLoader& loader) override;
  Status reserve(int64_t n) override;
  void begin_step(const Batch& batch) override;
  void run_layer(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) override;
  const char* layer_kind(int64_t layer) const override { return config_.moe.is_moe_layer(layer) ? "moe" : "dense"; }
  const std::vector<int64_t>& expert_tokens() const override { return moe_.expert_tokens(); }

 protected:
  // The layer's attention block: ctx.out from ctx.h.
  virtual void attention(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache);

  struct Layer {
    WeightVector attn_norm, ffn_norm;  // [n_embd]
    MlaWeights attention;
    FfnWeights ffn;  // the leading dense layers
    MoeWeights moe;  // the others
  };
  const ModelConfig& config_;
  Backend& backend_;
  std::vector<Layer> layers_;
  MlaAttention attention_;
  GatedFfn ffn_;
  MoeFfn moe_;
};

}  // namespace ds
