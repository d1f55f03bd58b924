#pragma once
// Picks the next token from logits. The chain follows llama.cpp's default
// order: penalties -> logit bias -> top-k -> top-p -> min-p -> temperature -> draw. The
// random stream is the request's own, seeded, so a seed reproduces a reply.

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace ds {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repetition_penalty = 1.0f;  // divides positive / multiplies negative logits of seen tokens
  float presence_penalty = 0.0f;    // subtracted once from each seen token
  float frequency_penalty = 0.0f;   // subtracted per occurrence
  int32_t penalty_last_n = 64;      // how many recent tokens the penalties look at
  uint64_t seed = 0;
  // Added to a token's logit before any cut-off (OpenAI's logit_bias: -100
  // bans a token in practice, +100 all but forces it).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // history: the tokens so far (prompt and output), most recent last.
  int32_t sample(const float* logits, int64_t n_vocab, const std::vector<int32_t>& history);

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  void apply_penalties(const std::vector<int32_t>& history);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
};

}  // namespace ds
