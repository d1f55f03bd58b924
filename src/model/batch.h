#pragma once
// The input of one forward pass: every token of the step, from any number of
// sequences. Token t sits at positions[t] of sequence seq_of_token[t], whose
// KV pages are block_tables[seq_of_token[t]]; its keys and values are written
// there before attention, and it attends to positions [0, positions[t]].

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/step_trace.h"
#include "kernels/paged_attention.h"

namespace ds {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_of_token;
  std::vector<BlockTableView> block_tables;
  // Each sequence's window pages (KvStream::windowed), where the cache has a
  // window pool of its own; empty: its window pages are its block table's.
  std::vector<BlockTableView> window_tables;
  // Tokens whose logits are wanted, in the order the logits are returned.
  std::vector<int32_t> logit_tokens;
  // Tokens whose final hidden states are wanted (Model::forward says which).
  std::vector<int32_t> hidden_tokens;
  // A multi-token-prediction layer's second input (Model::load_nextn): for
  // each token, in host memory, the hidden state [n_embd] of the position before it.
  const float* previous_hidden = nullptr;
  // The engine's profiler, when it records this step: the forward's layers and ops become its spans.
  StepTrace* trace = nullptr;
  // When set (by another thread, mid-step), the forward stops at the next
  // layer boundary and sets `yielded`: the step's work is dropped, to run
  // again (the engine yields a step of batch work to an online request).
  const std::atomic<bool>* yield = nullptr;
  mutable bool yielded = false;

  int64_t n_tokens() const { return int64_t(tokens.size()); }
};

}  // namespace ds
