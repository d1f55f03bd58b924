#pragma once
// The tensors of a decoder model outside its layers (the embedding, the final
// norm, the output), and the memory of every tensor, the layers' included
// (their own are in their family's LayerStack, model/family.h).
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
#include "model/model_options.h"
#include "model/tensor_loader.h"

namespace ds {

class LayerStack;

// What a multi-token-prediction layer (DeepSeek-V3's MTP module, blk.N.nextn.*)
// makes its input from: x = eh_proj [enorm(embed(token)); hnorm(previous hidden)].
struct NextnInput {
  WeightMatrix eh_proj;  // [n_embd, 2 n_embd]
  WeightVector enorm, hnorm;
};

class ModelWeights {
 public:
  // Reads the model's tensors, the layers' through `layers`, and places them
  // all. A multi-token-prediction layer's (config.first_block > 0) are its
  // nextn.* tensors, with `target`'s embedding and output where it has none of its own.
  static Result<std::unique_ptr<ModelWeights>> load(std::unique_ptr<GgufFile> file, const ModelConfig& config,
                                                    LayerStack& layers, LoadMode mode, bool interleave, Backend& backend,
                                                    const ModelWeights* target = nullptr);

  const GgufFile& file() const { return *file_; }
  WeightMatrix token_embd;  // [n_vocab, n_embd], rows as in the file (looked up, not multiplied)
  WeightVector output_norm;  // a multi-token-prediction layer's: nextn.shared_head_norm
  WeightMatrix output;      // [n_vocab, n_embd]; the embedding's tensor when tied
  bool tied_output = false;
  NextnInput nextn;  // a multi-token-prediction layer's; empty (eh_proj.data null) in a model
  size_t weight_bytes = 0;  // bytes of all matrices in the file
  std::vector<NamedMatrix> named_matrices;  // every matrix read from the file (not those made at load)
  // The matrix read from rows [first_row, ...) of the file's tensor `tensor`; nullptr if none.
  const WeightMatrix* find_matrix(const std::string& tensor, int64_t first_row = 0) const;

 private:
  ModelWeights() = default;
  std::unique_ptr<GgufFile> file_;
  DeviceBuffer memory_;  // copied and repacked matrices, matrices made at load, vectors
};

}  // namespace ds
