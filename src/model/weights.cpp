#include "model/weights.h"

#include <cstdio>

#include "model/family.h"

namespace ds {

namespace {

// A multi-token-prediction layer's own tensors; the target's embedding and
// output where the file gives it none (llama.cpp's converter writes neither:
// DeepSeek's checkpoints repeat the target's).
Status load_nextn(TensorLoader& loader, const ModelConfig& c, const ModelWeights& target, ModelWeights& w) {
  const std::string p = c.block_prefix(0) + "nextn.";
  if (loader.find(p + "embed_tokens.weight")) {
    DS_RETURN_IF_ERROR(loader.matrix(p + "embed_tokens.weight", c.n_vocab, c.n_embd, &w.token_embd, /*for_matmul=*/false));
  } else {
    w.token_embd = target.token_embd;
  }
  if (loader.find(p + "shared_head_head.weight")) {
    DS_RETURN_IF_ERROR(loader.matrix(p + "shared_head_head.weight", c.n_vocab, c.n_embd, &w.output));
  } else {
    w.output = target.output;
  }
  DS_RETURN_IF_ERROR(loader.vector(p + "shared_head_norm.weight", c.n_embd, &w.output_norm));
  DS_RETURN_IF_ERROR(loader.matrix(p + "eh_proj.weight", c.n_embd, 2 * c.n_embd, &w.nextn.eh_proj));
  DS_RETURN_IF_ERROR(loader.vector(p + "enorm.weight", c.n_embd, &w.nextn.enorm));
  return loader.vector(p + "hnorm.weight", c.n_embd, &w.nextn.hnorm);
}

// A tensor the model did not ask for: the file means a computation dsinfer would not do (llama.cpp
// refuses such files too). A multi-token-prediction layer's blocks are read apart, when drafting.
Status refuse_unread(const TensorLoader& loader, const ModelConfig& c) {
  std::vector<std::string> unread;
  for (const std::string& name : loader.unread()) {
    long long block = -1;
    if (std::sscanf(name.c_str(), "blk.%lld.", &block) == 1 && block >= c.n_layer && block < c.n_layer + c.n_nextn_layer) continue;
    unread.push_back(name);
  }
  if (unread.empty()) return Status();
  return Status::error("model: tensor '" + unread[0] + "'" + (unread.size() > 1 ? " (and " + std::to_string(unread.size() - 1) + " more)" : "") +
                       " is not one dsinfer reads for " + c.arch_name() + ": without it the model would compute something else than the file means");
}

}  // namespace

Result<std::unique_ptr<ModelWeights>> ModelWeights::load(std::unique_ptr<GgufFile> file, const ModelConfig& c, LayerStack& layers,
                                                         LoadMode mode, bool interleave, Backend& backend, const ModelWeights* target) {
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->file_ = std::move(file);
  TensorLoader loader(*w->file_, backend, c.ranks);
  if (c.n_vocab <= 0) return Status::error("model: tensor 'token_embd.weight' is missing");
  if (c.first_block > 0) {
    DS_RETURN_IF_ERROR(load_nextn(loader, c, *target, *w));
  } else {
    DS_RETURN_IF_ERROR(loader.matrix("token_embd.weight", c.n_vocab, c.n_embd, &w->token_embd, /*for_matmul=*/false));
    DS_RETURN_IF_ERROR(loader.vector("output_norm.weight", c.n_embd, &w->output_norm));
    w->tied_output = loader.find("output.weight") == nullptr;
    // Under tensor parallel each rank multiplies its part of the vocabulary (Model::forward gathers the logits).
    DS_RETURN_IF_ERROR(loader.matrix(w->tied_output ? "token_embd.weight" : "output.weight", c.n_vocab / c.ranks.ranks, c.n_embd,
                                     &w->output, true, Split::rows));
  }
  DS_RETURN_IF_ERROR(layers.load(loader));
  if (c.first_block == 0) DS_RETURN_IF_ERROR(refuse_unread(loader, c));
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
