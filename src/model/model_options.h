#pragma once
// How a model is loaded and run: what the command line decides, apart from the file.

#include <string>

namespace ds {

class Collective;

// Matrices used in place in the file mapping (where the backend reads host
// memory) or copied into the backend's memory (model/weights.h).
enum class LoadMode { copy, mmap };

// Which form multi-head latent attention takes for a chunk of one sequence's
// tokens (model/blocks/mla_attention.h): automatic weighs the two by their multiply-adds.
enum class MlaPrefill { automatic, expanded, absorbed };

struct ModelOptions {
  int n_threads = 2;  // the CPU backend's threads; a GPU backend's host threads
  LoadMode load_mode = LoadMode::mmap;
  bool interleave = true;       // matrices stored in the backend's own layout where it has one
  std::string backend = "cpu";  // create_backend's device: "cpu" or "cuda:N"
  MlaPrefill mla_prefill = MlaPrefill::automatic;  // other than automatic: refused by families without MLA
  // The KV pages hold rows for the file's multi-token-prediction layer too,
  // which then drafts (Model::load_nextn, engine/mtp_drafter.h).
  bool nextn_rows = false;
  // The ranks this model is split across (tensor parallel: each loads its
  // part, parallel/rank_layout.h); not owned, outlives the model. Null: one process.
  Collective* collective = nullptr;
  // With them, the routed experts divided among the ranks whole (expert parallel), not by width.
  bool expert_parallel = false;
};

}  // namespace ds
