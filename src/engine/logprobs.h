#pragma once
// Log-probabilities of sampled tokens under the model's distribution (the
// log-softmax of the raw logits, before sampling penalties), as the OpenAI
// API reports them.

#include <cstdint>
#include <utility>
#include <vector>

namespace ds {

struct TokenLogprobs {
  float logprob = 0.0f;                        // of the chosen token
  std::vector<std::pair<int32_t, float>> top;  // the n most likely tokens, most likely first
};

TokenLogprobs token_logprobs(const float* logits, int64_t n_vocab, int32_t chosen, int32_t n_top);

}  // namespace ds
