#pragma once
// A decoder-only transformer over paged KV memory. Which layers it has comes
// from its architecture family (model/family.h: one file per family in
// model/families/, composing the shared blocks of model/blocks/); the model
// runs the embedding, the family's layers and the output head, and never asks
// which family it has.
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
#include "model/device_array.h"
#include "model/family.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_options.h"
#include "model/weights.h"
#include "parallel/collective.h"

namespace ds {

// Called after each layer with its output hidden states [n_tokens, n_embd] f32.
using LayerObserver = std::function<void(int64_t layer, const float* hidden, int64_t n_tokens)>;

// Wraps the backend a model is made with before its weights are loaded (the
// calibration recorder watches every op through it, quant/calibration.h).
using BackendDecorator = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>;

// The part of the model `options` load: this process's rank of options.collective's.
RankLayout rank_layout(const ModelOptions& options);

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelOptions& options,
                                             const BackendDecorator& decorate = nullptr);
  // A model on `other`'s backend (its device, memory and threads; options'
  // backend and thread count are not read): a draft model beside its target,
  // which on a backend of its own would contend with it for the same cores.
  static Result<std::unique_ptr<Model>> load_beside(const std::string& path, const ModelOptions& options, Model& other);
  // The multi-token-prediction layer of `target`'s file (DeepSeek-V3's MTP
  // module: blk.{n_layer}.* with its nextn.* input projection and head norm)
  // as a model of one layer on target's backend, sharing its embedding and
  // output. Its cache is the target's: target must be loaded with
  // nextn_rows, and the layer keeps its rows after the target's layers.
  // Each of its tokens at position p is the token at p + 1 with the target's
  // hidden state at p as Batch::previous_hidden; its logits predict the token at p + 2.
  static Result<std::unique_ptr<Model>> load_nextn(const ModelOptions& options, Model& target);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  const GgufFile& file() const { return weights_->file(); }
  // The backend the model runs on: KV caches for it are made in its memory.
  Backend& backend() { return *backend_; }
  // The ranks it is split across (tensor parallel), over host memory (the
  // steps are broadcast over it); null in one process.
  Collective* collective() const { return collective_; }

  // Runs every token of the batch; writes logits [batch.logit_tokens.size(), n_vocab]
  // (null: not wanted here, as on a tensor-parallel rank other than 0, which
  // still computes its part of them)
  // and, where batch.hidden_tokens asks, final hidden states [hidden_tokens.size(), n_embd]:
  // after the output norm, or a multi-token-prediction layer's before its
  // head norm (what a chained draft takes as its previous hidden state).
  // Fails (without touching the cache) when the batch is malformed.
  Status forward(const Batch& batch, KvCache& cache, float* logits, const LayerObserver& observer = nullptr,
                 float* hidden = nullptr);

  // MoE models: how many of the last step's tokens each routed expert took,
  // summed over the MoE layers (load imbalance at a glance). Empty otherwise.
  const std::vector<int64_t>& last_expert_tokens() const { return layers_->expert_tokens(); }

 private:
  Model(const ModelConfig& config, std::shared_ptr<Backend> backend);
  static Result<std::unique_ptr<Model>> load_on(const std::string& path, const ModelOptions& options,
                                                std::shared_ptr<Backend> backend);
  // The model of `config` from `file`: its layers and weights (a multi-token-prediction layer's beside `target`'s).
  static Result<std::unique_ptr<Model>> build(std::unique_ptr<GgufFile> file, const ModelConfig& config, const ModelOptions& options,
                                              std::shared_ptr<Backend> backend, const ModelWeights* target);
  Status validate(const Batch& batch, const KvCache& cache) const;
  Status validate_window_tables(const Batch& batch, const KvCache& cache) const;
  Status ensure_workspace(int64_t n_tokens, int64_t n_logits, int64_t n_hidden);
  bool is_nextn() const { return weights_->nextn.eh_proj.data != nullptr; }
  // A multi-token-prediction layer's input into x_ from the embedded tokens there (NextnInput).
  void mix_previous_hidden(const Batch& batch, const ForwardContext& ctx);
  // Tensor parallel: logits_ [n_logits, n_vocab] from every rank's part of the output head (last_ normalised).
  void gather_logits(const ForwardContext& ctx, int64_t n_logits);

  ModelConfig config_;
  std::shared_ptr<Backend> backend_;        // declared before the weights: their memory is the backend's
  std::unique_ptr<LayerStack> layers_;      // the family's layers, their weights and workspace
  Collective* collective_ = nullptr;        // tensor parallel: the ranks the layers' outputs are summed over
  // The same ranks over the backend's memory where it is not the host's (NCCL
  // on CUDA), declared after the backend: it issues in the backend's stream.
  std::unique_ptr<Collective> device_ranks_;
  // What the forward sums and gathers over: device_ranks_, else collective_.
  Collective* forward_ranks() const { return device_ranks_ ? device_ranks_.get() : collective_; }
  std::unique_ptr<ModelWeights> weights_;

  // Workspace, rows of the step's tokens.
  DeviceArray x_;       // [n, n_embd] residual stream
  DeviceArray h_;       // [n, n_embd] normalised input of a block
  DeviceArray out_;     // [n, n_embd] a block's output
  DeviceArray last_;    // [n_logits, n_embd]
  DeviceArray logits_;  // [n_logits, n_vocab]
  DeviceArray logits_part_;          // tensor parallel: [n_logits, this rank's part of the vocabulary]
  DeviceArray gathered_logits_;      // ... and every rank's, rank by rank
  DeviceArray pair_;    // [n, 2 n_embd] a multi-token-prediction layer's normalised token and hidden state
  std::vector<float> host_rows_;  // layer outputs copied back for an observer
};

}  // namespace ds
