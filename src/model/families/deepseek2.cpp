// DeepSeek-V2, V3 and R1 (deepseek2): pre-norm layers of multi-head latent
// attention (model/blocks/mla_attention.h); the first leading_dense_block_count
// layers have a dense gated FFN, the rest DeepSeekMoE (model/blocks/moe_ffn.h:
// V2's softmax routing, V3's sigmoid with a selection bias and groups).

#include <algorithm>

#include "model/blocks/gated_ffn.h"
#include "model/blocks/mla_attention.h"
#include "model/blocks/moe_ffn.h"
#include "model/family.h"

namespace ds {
namespace {

Status read_config(const ConfigReader& r, ModelConfig& c) {
  DS_RETURN_IF_ERROR(read_mla_config(r, c));
  return read_moe_config(r, c);
}

class Deepseek2Layers : public LayerStack {
 public:
  Deepseek2Layers(const ModelConfig& c, const ModelOptions& options, Backend& backend)
      : config_(c), backend_(backend), layers_(size_t(c.n_layer)), attention_(c, options.mla_prefill) {}

  Status load(TensorLoader& loader) override {
    const ModelConfig& c = config_;
    std::vector<const MlaWeights*> attention;
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      Layer& l = layers_[size_t(i)];
      DS_RETURN_IF_ERROR(loader.vector(b + "attn_norm.weight", c.n_embd, &l.attn_norm));
      DS_RETURN_IF_ERROR(loader.vector(b + "ffn_norm.weight", c.n_embd, &l.ffn_norm));
      DS_RETURN_IF_ERROR(load_mla(loader, c, b, &l.attention));
      attention.push_back(&l.attention);
      if (c.moe.is_moe_layer(i)) {
        DS_RETURN_IF_ERROR(load_moe(loader, c, b, &l.moe));
      } else {
        DS_RETURN_IF_ERROR(load_ffn(loader, b, "", c.n_ff, c.n_embd, &l.ffn));
      }
    }
    return attention_.configure(backend_, attention);
  }

  Status reserve(int64_t n) override {
    const ModelConfig& c = config_;
    DS_RETURN_IF_ERROR(attention_.reserve(backend_, n));
    if (c.moe.n_expert > 0) DS_RETURN_IF_ERROR(moe_.reserve(backend_, c, n));
    // One gated FFN's workspace serves the dense layers and the shared experts.
    return ffn_.reserve(backend_, n, std::max(c.n_ff, c.moe.expert_ff * c.moe.n_expert_shared));
  }

  void begin_step(const Batch& batch) override {
    attention_.plan(batch);
    moe_.begin_step(config_);
  }

  void run_layer(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) override {
    const Layer& l = layers_[size_t(layer)];
    const int64_t n = step.n_tokens;
    ctx.pre_norm_residual(l.attn_norm, n, [&] { attention_.run(ctx, l.attention, step, cache.layer(layer)); });
    ctx.pre_norm_residual(l.ffn_norm, n, [&] {
      if (config_.moe.is_moe_layer(layer)) {
        moe_.run(ctx, l.moe, n, ffn_);
      } else {
        ffn_.run(ctx, l.ffn, ctx.h, n, ctx.out);
      }
    });
  }

  const char* layer_kind(int64_t layer) const override { return config_.moe.is_moe_layer(layer) ? "moe" : "dense"; }
  const std::vector<int64_t>& expert_tokens() const override { return moe_.expert_tokens(); }

 private:
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

Result<std::unique_ptr<LayerStack>> make_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend) {
  return std::unique_ptr<LayerStack>(new Deepseek2Layers(c, options, backend));
}

}  // namespace

const Family& deepseek2_family() {
  static const Family family{"deepseek2", RopeLayout::normal, read_config, make_layers};
  return family;
}

}  // namespace ds
