#pragma once
// An architecture family: a Family row of the table in family.cpp (the name
// in general.architecture, how its converter laid out RoPE's pairs, the keys
// it reads, the backend ops its layers call) and the layers it builds from
// the shared blocks (model/blocks/), one file per family in model/families/
// as llama.cpp's src/models/. Model runs any family's layers the same way and
// never asks which family it has.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/backend.h"
#include "model/batch.h"
#include "model/blocks/forward_context.h"
#include "model/config_reader.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_options.h"
#include "model/tensor_loader.h"

namespace ds {

// The layers of one model: their weights, their workspace (in the backend's
// memory, grown to the largest step seen), and the forward of each.
class LayerStack {
 public:
  virtual ~LayerStack() = default;
  // Registers every tensor of every layer with the loader, which points them at
  // their memory when it places the weights.
  virtual Status load(TensorLoader& loader) = 0;
  // Grows the workspace for a step of n tokens.
  virtual Status reserve(int64_t n_tokens) = 0;
  // Once per step, before its layers (the batch as given to Model::forward).
  virtual void begin_step(const Batch& batch) { (void)batch; }
  // Layer `layer` over the step's tokens: reads and updates the residual stream ctx.x.
  virtual void run_layer(int64_t layer, const ForwardContext& ctx, const StepIndex& step, KvCache& cache) = 0;
  // The trace's name for the layer's kind ("dense", "moe").
  virtual const char* layer_kind(int64_t layer) const = 0;
  // How many of the last step's tokens each routed expert took, summed over
  // the layers; empty for a model without routed experts.
  virtual const std::vector<int64_t>& expert_tokens() const;
};

struct Family {
  const char* name;        // general.architecture
  RopeLayout rope_layout;  // how the converter laid out q/k for RoPE
  // The family's keys, after the ones every family shares (ModelConfig::from_gguf):
  // head shapes, RoPE, the KV row (c.kv), its blocks' configs.
  Status (*read_config)(const ConfigReader& reader, ModelConfig& c);
  // Its layers for a model of config c on `backend`; refuses options it has no use for.
  Result<std::unique_ptr<LayerStack>> (*make_layers)(const ModelConfig& c, const ModelOptions& options, Backend& backend);
  // The backend ops its layers call (not those used only where a backend has them).
  std::vector<BackendOp> (*layer_ops)(const ModelConfig& c);
  // Divides c's head counts and widths among c.ranks (tensor parallel);
  // null where the family is not split yet.
  Status (*split)(ModelConfig& c) = nullptr;
};

// Every op the forward of a model of config c calls: the embedding, the
// output head and its family's layers'.
std::vector<BackendOp> forward_ops(const ModelConfig& c);
// Fails, naming them, when `backend` lacks any of those ops.
Status check_forward_ops(const ModelConfig& c, const Backend& backend);

// nullptr for an architecture dsinfer does not implement.
const Family* find_family(const std::string& name);
std::string supported_family_names();

// The families, each defined in its file under model/families/.
const Family& llama_family();
const Family& qwen2_family();
const Family& deepseek2_family();
const Family& deepseek32_family();
const Family& deepseek4_family();

// For the families without multi-head latent attention: refuses --mla-prefill.
Status refuse_mla_prefill(const ModelOptions& options);

}  // namespace ds
