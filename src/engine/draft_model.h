#pragma once
// Draft tokens from a second, smaller model that shares the target's
// vocabulary (llama.cpp's --model-draft, vLLM's draft-model method). It keeps
// its own paged KV cache for each sequence, catches up on the tokens the
// sequence gained since its last proposal (what the target rejected is
// recomputed; a long prompt over several steps, 2,048 tokens per step), and
// once caught up proposes its greedy continuation: one forward per draft
// token, every drafting sequence in the same batch, until a token the draft
// model itself gives less than a minimum probability (llama.cpp's
// --draft-p-min): such a token is rarely the target's, and each costs a draft
// forward and a verified position.
//
// The target keeps a draft token only where the token it samples itself at
// that position equals it (engine_core.cpp). For a greedy draft, which puts
// all its probability on one token d, that is the standard acceptance rule of
// speculative sampling (keep d with probability min(1, p(d) / 1) = p(d); else
// a token from p with d taken out, renormalised: exactly what sampling p gave
// when it did not give d), so the output is the one plain decoding gives,
// greedy or sampled with a seed.

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/model_runner.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ds {

// A greedy drafter's token: the lowest-numbered token of the largest logit,
// if its probability is at least min_probability; -1 if not.
int32_t confident_token(const float* logits, int64_t n_vocab, float min_probability);

struct DraftRequest {
  int64_t id;                          // the sequence
  const std::vector<int32_t>* tokens;  // its tokens so far (prompt and output)
  int32_t max_tokens;                  // draft at most this many
  std::vector<int32_t>* draft;         // the proposal: cleared, then filled
};

class DraftModel {
 public:
  // The drafter over `model` with a KV pool of kv.n_pages pages for all the
  // sequences it drafts for; drafts stop before a token of probability under
  // min_probability (0: never).
  static Result<std::unique_ptr<DraftModel>> create(std::unique_ptr<Model> model, const KvCacheOptions& kv,
                                                    float min_probability);

  // Fills each request's draft; a sequence the pool has no room for, or
  // still catching up, gets none this time. A failed forward leaves every
  // draft empty.
  Status propose(const std::vector<DraftRequest>& requests);
  // Forgets a sequence (it ended), freeing its pages.
  void forget(int64_t id);

  const Model& model() const { return *model_; }
  const KvCache& cache() const { return *cache_; }
  int64_t free_pages() const { return int64_t(free_pages_.size()); }

 private:
  struct SequenceCache {
    std::vector<int32_t> tokens;  // the tokens whose keys and values the pages hold, from position 0
    std::vector<int32_t> pages;
  };
  DraftModel(std::unique_ptr<Model> model, std::unique_ptr<KvCache> cache, float min_probability);
  // Pages for `n_positions` positions; false (holding what it had) when the pool is short.
  bool reserve(SequenceCache& s, int64_t n_positions);

  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  ModelRunner runner_;
  float min_probability_;
  std::vector<int32_t> free_pages_;
  std::unordered_map<int64_t, SequenceCache> sequences_;
};

}  // namespace ds
