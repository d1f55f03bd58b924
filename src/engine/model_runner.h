#pragma once
// Runs the model for one step, as nano-vllm's ModelRunner does: the caller
// adds each sequence's share of the step (its tokens at their positions and
// its KV pages) and marks the tokens whose logits or final hidden states it
// wants; run() performs the forward, and the runner holds the step's inputs
// and outputs until the next begin(). Every caller that runs the model (the
// engine step, `bench`, `logits`) builds its step here, and none touches a
// Batch: when the model runs on a device, this is where the step's inputs are
// put there and its logits brought back. A model split across ranks gets
// each step sent to the other ranks here (engine/step_broadcast.h), through
// the RankSteps it is made with.

#include <cstdint>
#include <vector>

#include "engine/step_broadcast.h"
#include "model/model.h"

namespace ds {

class ModelRunner {
 public:
  // `ranks`: where a split model's steps go (every split model has one).
  ModelRunner(Model& model, KvCache& memory, RankSteps ranks = {}) : model_(model), memory_(memory), ranks_(ranks) {}

  const Model& model() const { return model_; }
  // Starts a step: the previous one's inputs and outputs are dropped.
  void begin(StepTrace* trace = nullptr);
  // `n` tokens of one sequence at positions [first_position, first_position + n),
  // its keys and values in the KV pages `table` and, where the cache has a
  // window pool, its windowed streams in window_table's (both must live until
  // run() returns); returns the step index of its first token.
  int32_t add(const int32_t* tokens, int32_t first_position, int32_t n, BlockTableView table, BlockTableView window_table = {});
  // For a multi-token-prediction layer (Model::load_nextn): the previous
  // hidden states [n, n_embd] of the tokens just added, copied.
  void add_previous_hidden(const float* rows, int32_t n);
  // A token of the step whose logits (its next-token distribution) are
  // wanted; rows are numbered in the order they are asked for.
  void want_logits(int32_t step_token);
  // A token whose final hidden state (Model::forward says which) is wanted.
  void want_hidden(int32_t step_token);
  // The forward over every token added; the cache is untouched when it fails.
  Status run(const LayerObserver& observer = nullptr);
  // The next runs stop between layers once `*flag` is set (null: never); whether the last one did.
  void set_yield(const std::atomic<bool>* flag) { batch_.yield = flag; }
  bool yielded() const { return batch_.yielded; }

  int64_t n_tokens() const { return batch_.n_tokens(); }
  int64_t n_logit_rows() const { return int64_t(batch_.logit_tokens.size()); }
  // Row `row` of the logits [n_vocab] (writable: the grammar masks it in place).
  float* logits(int64_t row) { return logits_.data() + row * model_.config().n_vocab; }
  const float* hidden(int64_t row) const { return hidden_.data() + row * model_.config().n_embd; }

 private:
  Model& model_;
  KvCache& memory_;
  RankSteps ranks_;
  Batch batch_;
  std::vector<float> logits_, hidden_, previous_hidden_;
};

}  // namespace ds
