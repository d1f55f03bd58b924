#pragma once
// Tensor parallel's one scheduler: rank 0 runs the command (the engine, its
// scheduler and sampler, the server) and, before each forward of its split
// model, broadcasts the step (tokens, positions, block tables); every other
// rank runs the same forward over its part of the model and its own KV
// pages, which mirror rank 0's page for page, and its part of the logits
// (the output head is split by vocabulary), which only rank 0 keeps.

#include "base/status.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "parallel/collective.h"

namespace ds {

// Rank 0's KV cache options, on every rank: the others' pages mirror its
// pages, whatever each rank's free memory would have made of its defaults.
KvCacheOptions share_cache_options(Collective& ranks, const KvCacheOptions& options);

// Rank 0: the step about to run (ModelRunner::run sends it).
void send_step(Collective& ranks, const Batch& batch);

// The other ranks: each step rank 0 sends, through `model` over `cache`
// (made as rank 0 made its own), until rank 0 ends (StepLeader). A forward
// that fails here failed on rank 0 too (the same checks of the same step).
Status follow_steps(Model& model, KvCache& cache, Collective& ranks);

// Rank 0's end of the others' loop: they return from follow_steps when it
// goes, whichever way the command ends.
class StepLeader {
 public:
  explicit StepLeader(Collective* ranks) : ranks_(ranks) {}
  StepLeader(const StepLeader&) = delete;
  StepLeader& operator=(const StepLeader&) = delete;
  ~StepLeader();

 private:
  Collective* ranks_;
};

}  // namespace ds
