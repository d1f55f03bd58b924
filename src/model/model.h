#pragma once
// A decoder-only transformer over paged KV memory: Llama and Qwen2 (grouped-
// query attention, dense FFN) and DeepSeek-V2/V3 (multi-head latent attention,
// DeepSeekMoE), which swap in their own blocks (model_mla.cpp, model_moe.cpp).
//
// The forward pass composes the ops of a Backend (device/backend.h), which the
// model owns with its weights; it names no ISA and no device. Only the engine
// thread calls forward(); the workspace lives in the backend's memory and
// grows to the largest batch seen.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/backend.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

// Which form multi-head latent attention takes for a chunk of one sequence's
// tokens (model_mla.cpp): automatic weighs the two by their multiply-adds.
enum class MlaPrefill { automatic, expanded, absorbed };

struct ModelOptions {
  int n_threads = 2;  // the CPU backend's threads; a GPU backend's host threads
  LoadMode load_mode = LoadMode::mmap;
  bool interleave = true;       // matrices stored in the backend's own layout where it has one
  std::string backend = "cpu";  // create_backend's device: "cpu" or "cuda:N"
  MlaPrefill mla_prefill = MlaPrefill::automatic;  // other than automatic: refused for models without MLA
};

// Called after each layer with its output hidden states [n_tokens, n_embd] f32.
using LayerObserver = std::function<void(int64_t layer, const float* hidden, int64_t n_tokens)>;

// Wraps the backend a model is made with before its weights are loaded (the
// calibration recorder watches every op through it, quant/calibration.h).
using BackendDecorator = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>;

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelOptions& options,
                                             const BackendDecorator& decorate = nullptr);
  // A model on `other`'s backend (its device, memory and threads; options'
  // backend and thread count are not read): a draft model beside its target,
  // which on a backend of its own would contend with it for the same cores.
  static Result<std::unique_ptr<Model>> load_beside(const std::string& path, const ModelOptions& options, Model& other);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  const GgufFile& file() const { return weights_->file(); }
  // The backend the model runs on: KV caches for it are made in its memory.
  Backend& backend() { return *backend_; }

  // Runs every token of the batch; writes logits [batch.logit_tokens.size(), n_vocab]
  // and, where batch.hidden_tokens asks, final hidden states [hidden_tokens.size(), n_embd].
  // Fails (without touching the cache) when the batch is malformed.
  Status forward(const Batch& batch, KvCache& cache, float* logits, const LayerObserver& observer = nullptr,
                 float* hidden = nullptr);

  // MoE models: how many of the last step's tokens each routed expert took,
  // summed over the MoE layers (load imbalance at a glance). Empty otherwise.
  const std::vector<int64_t>& last_expert_tokens() const { return expert_tokens_; }

 private:
  // f32 rows in the backend's memory, grown to the largest step seen.
  class DeviceArray {
   public:
    Status reserve(Backend& backend, int64_t n);
    float* data() const { return buffer_.f32(); }

   private:
    DeviceBuffer buffer_;
  };

  Model(const ModelConfig& config, std::shared_ptr<Backend> backend);
  static Result<std::unique_ptr<Model>> load_on(const std::string& path, const ModelOptions& options,
                                                std::shared_ptr<Backend> backend);
  Status validate(const Batch& batch, const KvCache& cache) const;
  Status ensure_workspace(int64_t n_tokens, int64_t n_logits, int64_t n_hidden);
  void attention_block(int64_t layer, const StepIndex& step, KvCache& cache);
  void mla_attention_block(int64_t layer, const StepIndex& step, KvCache& cache);
  // The absorbed form for tokens [t0, t0 + n) of the step.
  void mla_absorbed_attention(const LayerWeights& w, const KvLayerView& kv, const StepIndex& step, int64_t t0, int64_t n);
  // Splits the step's tokens into mla_runs_ (model_mla.cpp).
  void plan_mla_runs(const Batch& batch);
  void ffn_block(int64_t layer, int64_t n_tokens);
  void moe_ffn_block(int64_t layer, int64_t n_tokens);
  // out = down(silu(gate(in)) * up(in)) for n rows.
  void gated_ffn(const WeightMatrix& w_gate, const WeightMatrix& w_up, const WeightMatrix& w_down, const float* in, int64_t n,
                 float* out);
  // out = in x w^T for n rows, traced as "matmul TYPE".
  void traced_matmul(const WeightMatrix& w, const float* in, int64_t n, float* out);
  // The residual stream += a block's output [n, n_embd], traced as "add".
  void residual_add(const float* block_out, int64_t n);
  void rms_norm_rows(const float* in, const WeightVector& weight, int64_t n, int64_t dim, int64_t stride, float* out);

  ModelConfig config_;
  std::shared_ptr<Backend> backend_;        // declared before the weights: their memory is the backend's
  std::unique_ptr<ModelWeights> weights_;
  StepTrace* trace_ = nullptr;  // the forward's batch.trace, for the forward's length

  // Workspace, rows of the step's tokens.
  DeviceArray x_;       // [n, n_embd] residual stream
  DeviceArray h_;       // [n, n_embd] normalised input of a block
  DeviceArray q_;       // [n, q_dim]
  DeviceArray k_, v_;   // [n, kv_dim]
  DeviceArray attn_;    // [n, q_dim]
  DeviceArray proj_;    // [n, n_embd]
  DeviceArray gate_, up_;  // [n, n_ff] the gated FFN's hidden rows
  DeviceArray last_;    // [n_logits, n_embd]
  DeviceArray logits_;  // [n_logits, n_vocab]
  // MLA: [n, 576]-style latent rows, absorbed queries, attended latents.
  DeviceArray q_a_, latent_, q_full_, attn_latent_;
  // The step's tokens in runs, each in one MLA form: a long run of one
  // sequence's consecutive positions may take the expanded form.
  struct MlaRun {
    int64_t t0 = 0, n = 0;
    bool expanded = false;
  };
  MlaPrefill mla_prefill_ = MlaPrefill::automatic;
  bool mla_expandable_ = false;  // the backend has the expanded form and every layer its k_up
  std::vector<MlaRun> mla_runs_;
  // MoE: router scores, the shared experts' output.
  DeviceArray router_logits_, shared_out_;
  std::vector<int64_t> expert_tokens_;
  std::vector<float> host_rows_;  // layer outputs copied back for an observer
};

}  // namespace ds
