#pragma once
// The tensors of a decoder model, checked against the config at load.
//
// Matrices are either views into the file mapping (LoadMode::mmap, the
// default) or copies in anonymous memory backed by transparent huge pages
// (LoadMode::copy). Measured on the 1.1B benchmark model (bench/, 2 threads):
// decode speed is the same within noise either way, while the mapping starts
// in 0.23 s instead of 0.8-1.6 s and holds half the resident memory, so the
// mapping is the default. Vectors (norms, biases) are converted to f32 at load.

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "kernels/matmul.h"
#include "model/model_config.h"

namespace ds {

enum class LoadMode { copy, mmap };

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  WeightMatrix wq, wk, wv, wo;   // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  std::vector<float> bq, bk, bv; // empty when the model has no q/k/v biases
  std::vector<float> ffn_norm;   // [n_embd]
  WeightMatrix w_gate, w_up, w_down;  // [n_ff, n_embd] x2, [n_embd, n_ff]

  // deepseek2 attention (MLA). Queries: wq, or wq_a -> q_a_norm -> wq_b.
  WeightMatrix wq_a, wq_b;            // [q_lora_rank, n_embd], [n_head * (nope + rope), q_lora_rank]
  std::vector<float> q_a_norm;        // [q_lora_rank]
  WeightMatrix wkv_a;                 // [kv_lora_rank + rope, n_embd]: the latent and the shared RoPE key
  std::vector<float> kv_a_norm;       // [kv_lora_rank]
  std::vector<WeightMatrix> k_b;      // per head [kv_lora_rank, nope]: folds the key up-projection into q
  std::vector<WeightMatrix> v_b;      // per head [v_head, kv_lora_rank]: the value up-projection

  // deepseek2 MoE layers (w_gate/w_up/w_down are the shared experts there).
  WeightMatrix router;                // [n_expert, n_embd]
  std::vector<float> router_bias;     // [n_expert] selection bias (V3); empty if none
  std::vector<WeightMatrix> expert_gate, expert_up, expert_down;  // per expert
};

class ModelWeights {
 public:
  static Result<std::unique_ptr<ModelWeights>> load(std::unique_ptr<GgufFile> file, const ModelConfig& config,
                                                    LoadMode mode);
  ~ModelWeights();

  const GgufFile& file() const { return *file_; }
  WeightMatrix token_embd;  // [n_vocab, n_embd]
  std::vector<float> output_norm;
  WeightMatrix output;      // [n_vocab, n_embd]; the embedding when tied
  bool tied_output = false;
  std::vector<LayerWeights> layers;
  size_t weight_bytes = 0;  // bytes of all matrices

 private:
  ModelWeights() = default;
  Status load_mla(class Loader& loader, const ModelConfig& c, const std::string& prefix, LayerWeights& l);
  Status load_moe(class Loader& loader, const ModelConfig& c, int64_t layer, const std::string& prefix, LayerWeights& l);
  std::vector<std::vector<uint8_t>> derived_;  // matrices made at load (k_b transposed out of kv_b)
  std::unique_ptr<GgufFile> file_;
  void* copy_ = nullptr;
  size_t copy_bytes_ = 0;
};

}  // namespace ds
