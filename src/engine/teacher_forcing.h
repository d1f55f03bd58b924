#pragma once
// Runs whole token sequences through a model teacher-forced: every position
// sees the given tokens before it, and the logits of every position come
// back. What `logits`, `eval` and calibration share: each sequence starts at
// position 0 in the same KV pages, so one cache serves any number of them.

#include <memory>
#include <vector>

#include "engine/model_runner.h"

namespace ds {

class TeacherForcing {
 public:
  // A cache of `kv`'s type for sequences of up to max_tokens tokens; `ranks`: a split model's.
  static Result<std::unique_ptr<TeacherForcing>> create(Model& model, KvCacheOptions kv, int64_t max_tokens, RankSteps ranks = {});

  // logits [n, n_vocab] for tokens[0..n), n <= max_tokens, in forward steps
  // of at most `step_tokens` tokens (0: one step); and, where `hidden` is
  // given, the final hidden states [n, n_embd] (Model::forward).
  Status run(const int32_t* tokens, int64_t n, int64_t step_tokens, float* logits,
             const LayerObserver& observer = nullptr, float* hidden = nullptr);
  // After run() over the same tokens, the model's multi-token-prediction
  // layer `nextn` (Model::load_nextn of it; the model loaded with
  // nextn_rows) over the same pages: logits [n - 1, n_vocab], row p from
  // tokens[p + 1] and hidden[p] (run()'s), predicting tokens[p + 2].
  Status run_nextn(Model& nextn, const int32_t* tokens, int64_t n, int64_t step_tokens, const float* hidden, float* logits);

  Model& model() { return model_; }
  KvCache& cache() { return *cache_; }

 private:
  TeacherForcing(Model& model, std::unique_ptr<KvCache> cache, int64_t max_tokens, RankSteps ranks);
  // tokens[0..n) at positions [0, n) through `runner`, in steps; previous_hidden: their rows of a nextn layer's second input.
  Status run_steps(ModelRunner& runner, const int32_t* tokens, int64_t n, int64_t step_tokens, float* logits,
                   const LayerObserver& observer, float* hidden, const float* previous_hidden);
  Model& model_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> pages_;
  int64_t max_tokens_;
  ModelRunner runner_;
};

}  // namespace ds
