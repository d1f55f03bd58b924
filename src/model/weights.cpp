#include "model/weights.h"

#include "model/family.h"

namespace ds {

Result<std::unique_ptr<ModelWeights>> ModelWeights::load(std::unique_ptr<GgufFile> file, const ModelConfig& c, LayerStack& layers,
                                                         LoadMode mode, bool interleave, Backend& backend) {
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->file_ = std::move(file);
  TensorLoader loader(*w->file_, backend);
  if (c.n_vocab <= 0) return Status::error("model: tensor 'token_embd.weight' is missing");
  DS_RETURN_IF_ERROR(loader.matrix("token_embd.weight", c.n_vocab, c.n_embd, &w->token_embd, /*for_matmul=*/false));
  DS_RETURN_IF_ERROR(loader.vector("output_norm.weight", c.n_embd, &w->output_norm));
  w->tied_output = w->file_->find_tensor("output.weight") == nullptr;
  DS_RETURN_IF_ERROR(loader.matrix(w->tied_output ? "token_embd.weight" : "output.weight", c.n_vocab, c.n_embd, &w->output));
  DS_RETURN_IF_ERROR(layers.load(loader));
  DS_RETURN_IF_ERROR(loader.place(mode, interleave, &w->memory_, &w->weight_bytes));
  w->named_matrices = loader.take_named();
  return w;
}

const WeightMatrix* ModelWeights::find_matrix(const std::string& tensor, int64_t first_row) const {
  for (const NamedMatrix& m : named_matrices) {
    if (m.tensor == tensor && m.first_row == first_row) return m.matrix;
  }
  return nullptr;
}

}  // namespace ds
