#pragma once
// The tensors of a decoder model, checked against the config at load.
//
// Matrices the backend stores in its own layout (on the CPU: Q8_0, Q4_0 and
// Q4_K whose rows come in whole groups of eight, interleaved for the integer
// kernels, kernels/interleaved_rows.h) are copied at load into the backend's
// memory; the file's pages they came from are released as each is copied, so
// the process never holds both. On the 1.1B benchmark models (2 threads)
// this makes prompt processing ~1.45x faster for Q8_0 and ~1.6x for Q4_K_M,
// and batched decode ~1.4x, at the same single-stream decode speed, for
// ~0.5 s more load time. The other
// matrices are used in place in the file mapping (LoadMode::mmap, the
// default, where the backend reads host memory) or copied too (LoadMode::copy);
// `interleave` false keeps every matrix in the file's layout. Vectors (norms,
// biases) are converted to f32, in the backend's memory too.

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/backend.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace ds {

enum class LoadMode { copy, mmap };

// n f32 values in the backend's memory; empty when the model has none.
struct WeightVector {
  const float* data = nullptr;
  int64_t n = 0;
  bool empty() const { return n == 0; }
};

struct LayerWeights {
  WeightVector attn_norm;             // [n_embd]
  WeightMatrix wq, wk, wv, wo;        // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  WeightVector bq, bk, bv;            // empty when the model has no q/k/v biases
  WeightVector ffn_norm;              // [n_embd]
  WeightMatrix w_gate, w_up, w_down;  // [n_ff, n_embd] x2, [n_embd, n_ff]

  // deepseek2 attention (MLA). Queries: wq, or wq_a -> q_a_norm -> wq_b.
  WeightMatrix wq_a, wq_b;            // [q_lora_rank, n_embd], [n_head * (nope + rope), q_lora_rank]
  WeightVector q_a_norm;              // [q_lora_rank]
  WeightMatrix wkv_a;                 // [kv_lora_rank + rope, n_embd]: the latent and the shared RoPE key
  WeightVector kv_a_norm;             // [kv_lora_rank]
  std::vector<WeightMatrix> k_b;      // per head [kv_lora_rank, nope]: folds the key up-projection into q
  std::vector<WeightMatrix> v_b;      // per head [v_head, kv_lora_rank]: the value up-projection
  std::vector<WeightMatrix> k_up;     // per head [nope, kv_lora_rank]: the key up-projection (the expanded form;
                                      // empty where k_b is I8)

  // deepseek2 MoE layers (w_gate/w_up/w_down are the shared experts there).
  WeightMatrix router;                // [n_expert, n_embd]
  WeightVector router_bias;           // [n_expert] selection bias (V3); empty if none
  std::vector<WeightMatrix> expert_gate, expert_up, expert_down;  // per expert
};

// A matrix of the model and where it came from: rows [first_row, first_row +
// matrix->n_rows) of the file's tensor (an expert of a stacked tensor, a head
// of kv_b); what calibration names a matmul's weights by.
struct NamedMatrix {
  std::string tensor;
  int64_t first_row = 0;
  const WeightMatrix* matrix = nullptr;
};

class ModelWeights {
 public:
  static Result<std::unique_ptr<ModelWeights>> load(std::unique_ptr<GgufFile> file, const ModelConfig& config,
                                                    LoadMode mode, bool interleave, Backend& backend);

  const GgufFile& file() const { return *file_; }
  WeightMatrix token_embd;  // [n_vocab, n_embd], rows as in the file (looked up, not multiplied)
  WeightVector output_norm;
  WeightMatrix output;      // [n_vocab, n_embd]; the embedding's tensor when tied
  bool tied_output = false;
  std::vector<LayerWeights> layers;
  size_t weight_bytes = 0;  // bytes of all matrices in the file
  std::vector<NamedMatrix> named_matrices;  // every matrix read from the file (not those made at load)

 private:
  ModelWeights() = default;
  Status load_mla(class Loader& loader, const ModelConfig& c, const std::string& prefix, LayerWeights& l);
  Status load_moe(class Loader& loader, const ModelConfig& c, int64_t layer, const std::string& prefix, LayerWeights& l);
  std::unique_ptr<GgufFile> file_;
  DeviceBuffer memory_;  // copied and repacked matrices, matrices made at load, vectors
};

}  // namespace ds
