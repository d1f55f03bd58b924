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
  std::unique_ptr<GgufFile> file_;
  void* copy_ = nullptr;
  size_t copy_bytes_ = 0;
};

}  // namespace ds
