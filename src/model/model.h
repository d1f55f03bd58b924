#pragma once
// A decoder-only transformer (Llama, Qwen2) over paged KV memory.
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

  // Runs every token of the batch; writes logits [batch.logit_tokens.size(), n_vocab].
  // Fails (without touching the cache) when the batch is malformed.
  Status forward(const Batch& batch, KvCache& cache, float* logits, const LayerObserver& observer = nullptr);

 private:
  Model(const ModelConfig& config, std::unique_ptr<ModelWeights> weights, int n_threads);
  Status validate(const Batch& batch, const KvCache& cache) const;
  void ensure_workspace(int64_t n_tokens, int64_t n_logits);
  void attention_block(int64_t layer, const Batch& batch, KvCache& cache);
  void ffn_block(int64_t layer, int64_t n_tokens);

  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  ThreadPool pool_;

  // Workspace, rows of the step's tokens.
  std::vector<float> x_;       // [n, n_embd] residual stream
  std::vector<float> h_;       // [n, n_embd] normalised input of a block
  std::vector<float> q_;       // [n, q_dim]
  std::vector<float> k_, v_;   // [n, kv_dim]
  std::vector<float> attn_;    // [n, q_dim]
  std::vector<float> proj_;    // [n, n_embd]
  std::vector<float> gate_, up_;  // [n, n_ff]
  std::vector<float> last_;    // [n_logits, n_embd]
  MatmulScratch matmul_scratch_;
  AttentionScratch attention_scratch_;
};

}  // namespace ds
