#pragma once
// A decoder-only transformer over paged KV memory: Llama and Qwen2 (grouped-
// query attention, dense FFN) and DeepSeek-V2/V3 (multi-head latent attention,
// DeepSeekMoE), which swap in their own blocks (model_mla.cpp, model_moe.cpp).
//
// Only the engine thread calls forward(); the model owns its thread pool and
// its scratch buffers, which grow to the largest batch seen and are reused.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

struct ModelOptions {
  int n_threads = 2;
  LoadMode load_mode = LoadMode::mmap;
  bool interleave = true;  // Q8_0/Q4_0/Q4_K matrices copied into the kernels' layout
};

// Called after each layer with its output hidden states [n_tokens, n_embd] f32.
using LayerObserver = std::function<void(int64_t layer, const float* hidden, int64_t n_tokens)>;

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelOptions& options);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  const GgufFile& file() const { return weights_->file(); }
  ThreadPool& pool() { return pool_; }

  // Runs every token of the batch; writes logits [batch.logit_tokens.size(), n_vocab]
  // and, where batch.hidden_tokens asks, final hidden states [hidden_tokens.size(), n_embd].
  // Fails (without touching the cache) when the batch is malformed.
  Status forward(const Batch& batch, KvCache& cache, float* logits, const LayerObserver& observer = nullptr,
                 float* hidden = nullptr);

  // MoE models: how many of the last step's tokens each routed expert took,
  // summed over the MoE layers (load imbalance at a glance). Empty otherwise.
  const std::vector<int64_t>& last_expert_tokens() const { return expert_tokens_; }

 private:
  Model(const ModelConfig& config, std::unique_ptr<ModelWeights> weights, int n_threads);
  Status validate(const Batch& batch, const KvCache& cache) const;
  void ensure_workspace(int64_t n_tokens, int64_t n_logits);
  void attention_block(int64_t layer, const Batch& batch, KvCache& cache);
  void mla_attention_block(int64_t layer, const Batch& batch, KvCache& cache);
  void ffn_block(int64_t layer, int64_t n_tokens);
  void moe_ffn_block(int64_t layer, int64_t n_tokens);
  // The routed experts of one MoE layer, tokens already routed.
  void routed_experts(int64_t layer, int64_t n_tokens);

  // Buffers of one gated FFN: its hidden activations and converted inputs.
  struct FfnWorkspace {
    std::vector<float> gate, up;
    MatmulScratch scratch;
  };
  // out = down(silu(gate(in)) * up(in)) for n rows, on `pool`; its ops traced when `trace` records.
  static void gated_ffn(ThreadPool& pool, FfnWorkspace& ws, const WeightMatrix& w_gate, const WeightMatrix& w_up,
                        const WeightMatrix& w_down, const float* in, int64_t n, float* out, StepTrace* trace);
  // out = in x w^T for n rows on the model's pool, traced as "matmul TYPE".
  void traced_matmul(const WeightMatrix& w, const float* in, int64_t n, float* out);
  // The residual stream += a block's output [n, n_embd], traced as "add".
  void residual_add(const float* block_out, int64_t n);
  void rms_norm_rows(const float* in, const std::vector<float>& weight, int64_t n, int64_t dim, int64_t stride, float* out);

  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  ThreadPool pool_;
  StepTrace* trace_ = nullptr;  // the forward's batch.trace, for the forward's length

  // Workspace, rows of the step's tokens.
  std::vector<float> x_;       // [n, n_embd] residual stream
  std::vector<float> h_;       // [n, n_embd] normalised input of a block
  std::vector<float> q_;       // [n, q_dim]
  std::vector<float> k_, v_;   // [n, kv_dim]
  std::vector<float> attn_;    // [n, q_dim]
  std::vector<float> proj_;    // [n, n_embd]
  FfnWorkspace ffn_;           // [n, n_ff] gate and up
  std::vector<float> last_;    // [n_logits, n_embd]
  // MLA: [n, 576]-style latent rows, per-head gathers, absorbed queries.
  std::vector<float> q_a_, latent_, q_pe_, head_in_, head_out_, q_full_, attn_latent_;
  // MoE: router scores, routing, per-(token, slot) outputs, the shared experts' output.
  std::vector<float> router_logits_, slot_out_, shared_out_;
  std::vector<int32_t> routed_expert_;  // [n, n_expert_used]
  std::vector<float> routed_weight_;    // [n, n_expert_used]
  std::vector<int64_t> expert_tokens_;
  // One per pool thread: a pool of its own thread alone and buffers, so that
  // each thread can run whole experts (model_moe.cpp).
  struct ExpertWorker {
    ThreadPool serial{1};
    FfnWorkspace ffn;
    std::vector<float> in, out;  // the expert's tokens, gathered, and its outputs
  };
  std::vector<std::unique_ptr<ExpertWorker>> expert_workers_;
  MatmulScratch matmul_scratch_;
  AttentionScratch attention_scratch_;
};

}  // namespace ds
