#pragma once
// Multi-head latent attention (DeepSeek-V2/V3): the forms, their cost and why
// decode stays absorbed are in mla_attention.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/blocks/forward_context.h"
#include "model/device_array.h"
#include "model/kv_cache.h"
#include "model/model_options.h"

namespace ds {

struct MlaWeights {
  // Queries: wq, or wq_a -> q_a_norm -> wq_b.
  WeightMatrix wq;                  // [n_head * (nope + rope), n_embd] (no q LoRA)
  WeightMatrix wq_a, wq_b;          // [q_lora_rank, n_embd], [n_head * (nope + rope), q_lora_rank]
  WeightVector q_a_norm;            // [q_lora_rank]
  WeightMatrix wkv_a;               // [kv_lora_rank + rope, n_embd]: the latent and the shared RoPE key
  WeightVector kv_a_norm;           // [kv_lora_rank]
  WeightMatrix wo;                  // [n_embd, n_head * v_head]
  std::vector<WeightMatrix> k_b;    // per head [kv_lora_rank, nope]: folds the key up-projection into q
  std::vector<WeightMatrix> v_b;    // per head [v_head, kv_lora_rank]: the value up-projection
  std::vector<WeightMatrix> k_up;   // per head [nope, kv_lora_rank]: the key up-projection (the expanded form;
                                    // empty where k_b is I8)
};

// The MLA shapes into c.mla, the head shapes, RoPE (over the rope part of
// each head) and the KV row: one latent-plus-RoPE-key row shared by all heads.
Status read_mla_config(const ConfigReader& reader, ModelConfig& c);

// A layer's MLA tensors: the split attn_k_b/attn_v_b layout or the combined attn_kv_b.
Status load_mla(TensorLoader& loader, const ModelConfig& c, const std::string& prefix, MlaWeights* w);

// DeepSeek Sparse Attention's choice for the step's tokens (V3.2): token t
// attends to the n_selected[t] positions at selected[t * top_k ...], in the
// backend's memory (model/families/deepseek32.cpp).
struct PositionSelection {
  const int32_t* selected = nullptr;
  const int32_t* n_selected = nullptr;
  int64_t top_k = 0;
};

class MlaAttention {
 public:
  // `prefill` other than automatic forces a form; the expanded one is refused
  // when the backend lacks it or a layer's k_b is I8 (checked by configure).
  MlaAttention(const ModelConfig& c, MlaPrefill prefill) : config_(c), prefill_(prefill) {}
  // After the weights are loaded: whether the expanded form is available.
  Status configure(Backend& backend, const std::vector<const MlaWeights*>& layers);
  Status reserve(Backend& backend, int64_t n);
  // Splits the step's tokens into runs, each in one form.
  void plan(const Batch& batch);
  // ctx.out [n, n_embd] from ctx.h, through the layer's latent rows: project, then attend.
  void run(const ForwardContext& ctx, const MlaWeights& w, const StepIndex& step, const KvLayerView& kv) {
    project(ctx, w, step, kv);
    attend(ctx, w, step, kv, nullptr);
  }
  // The queries and the step's latent rows from ctx.h, the rows written to the cache.
  void project(const ForwardContext& ctx, const MlaWeights& w, const StepIndex& step, const KvLayerView& kv);
  // After project(): the queries' normalised low-rank form [n, q_lora_rank] (models with q LoRA).
  const float* query_latent() const { return q_a_.data(); }
  // After project(): ctx.out [n, n_embd], each token attending to every
  // position up to its own, or only to those `selection` names (the absorbed form then).
  void attend(const ForwardContext& ctx, const MlaWeights& w, const StepIndex& step, const KvLayerView& kv,
              const PositionSelection* selection);

 private:
  // The absorbed form for tokens [t0, t0 + n) of the step.
  void absorbed(const ForwardContext& ctx, const MlaWeights& w, const KvLayerView& kv, const StepIndex& step, int64_t t0, int64_t n,
                const PositionSelection* selection);

  const ModelConfig& config_;
  MlaPrefill prefill_;
  bool expandable_ = false;  // the backend has the expanded form and every layer its k_up
  // The step's tokens in runs, each in one MLA form: a long run of one
  // sequence's consecutive positions may take the expanded form.
  struct Run {
    int64_t t0 = 0, n = 0;
    bool expanded = false;
  };
  std::vector<Run> runs_;
  DeviceArray q_;            // [n, n_head * (nope + rope)]
  DeviceArray q_a_;          // [n, q_lora_rank]
  DeviceArray latent_;       // [n, kv_lora_rank + rope]: the step's cache rows
  DeviceArray q_full_;       // [n, n_head, kv_lora_rank + rope]: absorbed queries
  DeviceArray attn_latent_;  // [n, n_head, kv_lora_rank]: attended latents
  DeviceArray attn_;         // [n, n_head * v_head]
};

}  // namespace ds
