#pragma once
// Prompt lookup (Saxena's "prompt lookup decoding", vLLM's ngram method):
// draft tokens for speculative decoding taken from the sequence itself. The
// last n tokens (n from ngram_max down to ngram_min) are looked for earlier
// in the prompt and output; the tokens that followed their latest earlier
// occurrence are the draft. It costs no model, and pays where a reply quotes
// its context (summaries, extraction, edits of a contract) or repeats itself.
// The target model verifies the draft in one batched forward (engine_core.cpp).

#include <cstdint>
#include <string>
#include <vector>

namespace ds {

struct SpeculationConfig {
  int32_t n_draft = 0;    // draft tokens per decode step at most; 0: no speculation
  int32_t ngram_min = 2;  // shorter matches draft too often wrongly
  int32_t ngram_max = 4;
  std::string draft_model;  // a GGUF file: draft with that model (engine/draft_model.h) instead of prompt lookup
  float draft_p_min = 0.75f;  // ... whose drafts stop before a token it gives less probability (llama.cpp's default)
  bool mtp = false;  // draft with the model file's multi-token-prediction layer (engine/mtp_drafter.h), draft_p_min as above
};

// Up to max_tokens draft tokens continuing `tokens`; empty when no n-gram recurs.
std::vector<int32_t> propose_ngram_draft(const SpeculationConfig& config, const std::vector<int32_t>& tokens,
                                         int32_t max_tokens);

}  // namespace ds
