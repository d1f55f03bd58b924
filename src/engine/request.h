#pragma once
// A request as the engine sees it, from admission to its last output: what a
// caller asks (EngineRequest, GenerationParams), whether it may run (Admit),
// the engine's own record of it while it runs (Request), and what each step
// hands back (StepOutput, with RequestMetrics on the last one).
//
//   Engine::admit ──fits──► add ──► waiting ⇄ running (scheduler.h) ──► last output (finish set) ──► gone
//        │                                                     cancel ──┘
//        └── never_fits / not_now: the caller refuses it (400 / 503), nothing is queued

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/admission_rule.h"
#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/stop_matcher.h"
#include "grammar/token_matcher.h"
#include "tokenizer/detokenizer.h"

namespace ds {

struct GenerationParams {
  // max_tokens: up to the end of the context (OpenAI's absent max_tokens).
  static constexpr int32_t k_to_context_end = 0;

  SamplingParams sampling;
  int32_t max_tokens = 16;
  bool stop_at_end_of_generation = true;
  std::vector<int32_t> stop_tokens;  // sampling one ends the request as an end token does (its text is not output)
  // Stop strings, matched on the generated text (an engine with a tokenizer
  // only): the text ends just before the first match, and text that could
  // still begin one is held back.
  std::vector<std::string> stop;
  int32_t priority = 0;
  uint64_t tenant_salt = 0;
  int32_t logprobs = -1;  // -1: none; n >= 0: the chosen token's logprob and the n most likely
  // Constrained decoding: tokens the grammar cannot take are masked before
  // sampling (each request its own state; a copy per choice).
  std::optional<grammar::TokenMatcher> grammar;
  // -1: none; n >= 0: each prompt token's logprob given the ones before it
  // (with the n most likely), as completions' echo reports them. The prompt
  // is then computed in full, not taken from the prefix cache.
  int32_t prompt_logprobs = -1;
  // Embedding instead of generation: the prompt's final hidden states pooled
  // (the last token's, or the mean of all) and L2-normalised; nothing is sampled.
  enum class Pooling { none, last, mean };
  Pooling embedding = Pooling::none;
};

struct EngineRequest {
  std::vector<int32_t> prompt;
  GenerationParams params;
};

enum class FinishReason { none, stop, length, cancelled, error };

// How one request went, reported with its last output: the server's usage
// figures and latency histograms.
struct RequestMetrics {
  int32_t n_prompt_tokens = 0;
  int32_t n_output_tokens = 0;
  int32_t n_cached_prompt_tokens = 0;  // found in the prefix cache at admission
  double queue_seconds = 0.0;          // added -> first scheduled
  double ttft_seconds = 0.0;           // added -> first output token (0 if none)
  double tpot_seconds = 0.0;           // mean time between later output tokens (0 with fewer than two)
  double e2e_seconds = 0.0;            // added -> finished
};

// One new token of one request (or its end).
struct StepOutput {
  int64_t id = 0;
  int32_t token = -1;  // -1 when the request ended without a new token (cancelled, an embedding)
  FinishReason finish = FinishReason::none;
  bool in_reply = false;  // `token` is part of the reply (an end or stop token is not)
  std::string text;       // the UTF-8 text that became safe to show (an engine with a tokenizer)
  std::string stop_string;  // with finish stop: the stop string that matched (empty: an end or stop token)
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them
  std::optional<RequestMetrics> metrics;  // with the last output of a request
  std::vector<TokenLogprobs> prompt_logprobs;  // with the first token: prompt tokens 1.. (prompt_logprobs >= 0)
  std::vector<float> embedding;                // an embedding request's result, with its only output
};

// The engine's record of one request while it is queued or running (engine
// thread only). EngineCore's stages read and advance it; it goes with the
// request's last output.
struct Request {
  using Clock = std::chrono::steady_clock;

  Request(int64_t id, std::vector<int32_t> prompt, GenerationParams params, int32_t max_new_tokens, const Tokenizer* tokenizer);

  Sequence seq;  // what the scheduler plans with: tokens, computed count, draft
  GenerationParams params;
  Sampler sampler;
  std::optional<IncrementalDetokenizer> detokenizer;  // with a tokenizer: the reply's text
  StopMatcher stops;
  Clock::time_point added, scheduled, first_token, last_token;
  bool started = false;
  std::vector<TokenLogprobs> prompt_logprobs;  // filled as the prompt is computed (kept across preemption)
  std::vector<double> pooled;                  // embedding: the sum of the hidden states taken so far
  int32_t n_pooled = 0;                        // ... over this many positions (mean: positions 0..n_pooled-1)

  int32_t n_generated() const { return int32_t(seq.tokens.size()) - seq.n_prompt; }
  bool embeds() const { return params.embedding != GenerationParams::Pooling::none; }
  // Appends a sampled token and decides, in this one place, whether it ends
  // the reply and what text it makes safe to show: an end or stop token ends
  // it and is not text; a stop string ends it, the text cut just before it;
  // max_tokens ends it, the held-back text let out.
  struct Appended {
    FinishReason finish = FinishReason::none;
    bool in_reply = true;  // the token is part of the reply
    std::string text;
    std::string stop_string;  // the stop string that ended the reply, if one did
  };
  Appended append(int32_t token, const std::vector<int32_t>& end_of_generation);
  // The text still held back, for a request that ends otherwise (cancelled).
  std::string rest_of_text();
  // How it went, as of `now`.
  RequestMetrics metrics(Clock::time_point now) const;
};

}  // namespace ds
