// Llama (and the R1-distill models built on it): pre-norm layers of
// grouped-query attention and a gated FFN; RoPE over neighbouring pairs, as
// llama.cpp's converter permutes q and k.
//
//   h = x + attention(rms_norm(x))
//   x = h + ffn(rms_norm(h))

#include "model/families/llama.h"

#include "model/blocks/gated_ffn.h"
#include "model/blocks/gqa_attention.h"

namespace ds {
namespace {

class LlamaLayers : public LayerStack {
 public:
  LlamaLayers(const ModelConfig& c, Backend& backend, bool qkv_biases_required)
      : config_(c), backend_(backend), qkv_biases_required_(qkv_biases_required), layers_(size_t(c.n_layer)) {}

  Status load(TensorLoader& loader) override {
    const ModelConfig& c = config_;
    DS_RETURN_IF_ERROR(load_rope_freqs(loader, c, &rope_freqs_));
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string b = c.block_prefix(i);
      Layer& l = layers_[size_t(i)];
      DS_RETURN_IF_ERROR(loader.vector(b + "attn_norm.weight", c.n_embd, &l.attn_norm));
      DS_RETURN_IF_ERROR(loader.vector(b + "ffn_norm.weight", c.n_embd, &l.ffn_norm));
      DS_RETURN_IF_ERROR(load_gqa(loader, c, b, qkv_biases_required_, &l.attention));
      DS_RETURN_IF_ERROR(load_ffn(loader, b, "", c.n_ff, c.n_embd, &l.ffn));
    }
    return Status();
  }

  Status reserve(int64_t n) override {
    DS_RETURN_IF_ERROR(attention_.reserve(backend_, config_, n));
    return ffn_.reserve(backend_, n, config_.n_ff);
  }

  void run_layer(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) override {
    const Layer& l = layers_[size_t(layer)];
    const int64_t n = step.n_tokens;
    ctx.pre_norm_residual(l.attn_norm, n, [&] { attention_.run(ctx, l.attention, rope_freqs_, step, cache.layer(layer)); });
    ctx.pre_norm_residual(l.ffn_norm, n, [&] { ffn_.run(ctx, l.ffn, ctx.h, n, ctx.out); });
  }

  const char* layer_kind(int64_t) const override { return "dense"; }

 private:
  struct Layer {
    WeightVector attn_norm, ffn_norm;  // [n_embd]
    GqaWeights attention;
    FfnWeights ffn;
  };
  const ModelConfig& config_;
  Backend& backend_;
  const bool qkv_biases_required_;
  std::vector<Layer> layers_;
  WeightVector rope_freqs_;  // Llama 3's frequency factors, where the file has them
  GqaAttention attention_;
  GatedFfn ffn_;
};

Result<std::unique_ptr<LayerStack>> make_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend) {
  return make_llama_layers(c, options, backend, /*qkv_biases_required=*/false);
}

}  // namespace

std::vector<BackendOp> llama_layer_ops(const ModelConfig&) {
  return {BackendOp::rms_norm, BackendOp::matmul, BackendOp::add_bias, BackendOp::rope_kv_write, BackendOp::paged_attention,
          BackendOp::silu_mul, BackendOp::add};
}

Status split_llama_config(ModelConfig& c) {
  DS_RETURN_IF_ERROR(split_gqa_heads(c));
  if (c.n_ff % c.ranks.ranks != 0) {
    return Status::error("tensor parallel: " + std::string(c.arch_name()) + ".feed_forward_length " + std::to_string(c.n_ff) +
                         " must divide by " + std::to_string(c.ranks.ranks) + " ranks");
  }
  c.n_ff /= c.ranks.ranks;
  return Status();
}

Status read_llama_config(const ConfigReader& r, ModelConfig& c) {
  DS_RETURN_IF_ERROR(r.dim("feed_forward_length", &c.n_ff));
  DS_RETURN_IF_ERROR(read_gqa_config(r, c));
  return read_rope(r, c.head_dim, c);
}

Result<std::unique_ptr<LayerStack>> make_llama_layers(const ModelConfig& c, const ModelOptions& options, Backend& backend,
                                                      bool qkv_biases_required) {
  DS_RETURN_IF_ERROR(refuse_mla_prefill(options));
  return std::unique_ptr<LayerStack>(new LlamaLayers(c, backend, qkv_biases_required));
}

const Family& llama_family() {
  static const Family family{"llama", RopeLayout::normal, read_llama_config, make_layers, llama_layer_ops, split_llama_config};
  return family;
}

}  // namespace ds
