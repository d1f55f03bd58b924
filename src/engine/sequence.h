#pragma once
// What the scheduler and the KV manager see of a request: its tokens and how
// many of them are computed (their keys and values cached). The engine's
// Request (request.h) owns one.

#include <cstdint>
#include <vector>

namespace ds {

struct Sequence {
  int64_t id = 0;
  int32_t priority = 0;  // lower runs first; equal priorities run in arrival order
  uint64_t tenant_salt = 0;
  std::vector<int32_t> tokens;
  int32_t n_prompt = 0;
  int32_t max_new_tokens = 0;
  int32_t n_computed = 0;
  int32_t n_preemptions = 0;
  int32_t n_cached_prompt = -1;  // prompt tokens the prefix cache held at first admission; -1 before
  bool reuse_prefix = true;      // false: every prompt token is computed (its logits are wanted)
  // Speculative decoding: tokens proposed to follow `tokens`, verified by this
  // step if the scheduler finds room for them (engine/ngram_drafter.h).
  std::vector<int32_t> draft = {};
};

}  // namespace ds
