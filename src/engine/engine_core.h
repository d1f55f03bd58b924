#pragma once
// One engine step at a time, single-threaded: schedule -> build the batch ->
// forward -> sample -> report. The serving Engine runs this on its own thread
// and feeds it from the request queue; tests and offline tools drive it
// directly. It owns the page pool, the KV manager and the scheduler; the
// model and its KV page memory are lent to it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/block_pool.h"
#include "engine/draft_model.h"
#include "engine/kv_cache_manager.h"
#include "engine/logprobs.h"
#include "engine/model_runner.h"
#include "engine/ngram_drafter.h"
#include "engine/sampler.h"
#include "grammar/token_matcher.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ds {

struct EngineCoreConfig {
  SchedulerConfig scheduler;
  bool prefix_cache = true;
  uint64_t model_salt = 1;  // identifies the model in prefix-cache keys
  // Speculative decoding, by prompt lookup or, when draft_model is set, by
  // that model (speculation.n_draft tokens at most either way). A draft token
  // is kept only where the token sampled from the target's own logits at its
  // position equals it, so the output is the one plain decoding gives (the
  // forward is batch-invariant), for greedy and seeded sampling alike.
  SpeculationConfig speculation;
  DraftModel* draft_model = nullptr;  // not owned; outlives the core
};

struct GenerationParams {
  SamplingParams sampling;
  int32_t max_tokens = 16;
  bool stop_at_end_of_generation = true;
  std::vector<int32_t> stop_tokens;  // sampling one ends the request as an end token does (its text is not output)
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

// A snapshot of the engine for operators (the server exports it as metrics).
struct EngineStats {
  int32_t n_running = 0;
  int32_t n_waiting = 0;
  int64_t n_preemptions = 0;
  int32_t pages_total = 0;
  int32_t pages_held = 0;    // held by at least one sequence
  int32_t pages_cached = 0;  // registered in the prefix cache (held or not)
  int64_t page_bytes = 0;    // one page across all layers, keys and values
  double fragmentation = 0.0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t steps = 0;
  int64_t step_tokens = 0;       // tokens computed, all steps
  int32_t last_step_tokens = 0;
  double last_step_seconds = 0.0;
  double grammar_mask_seconds = 0.0;  // all steps: time spent masking logits for constrained requests
  int64_t drafts = 0;                 // all steps: drafts verified (a sequence's draft tokens in one step)
  int64_t draft_tokens = 0;           // ... the draft tokens in them (speculative decoding)
  int64_t accepted_draft_tokens = 0;  // ... and of those, kept
  std::vector<int64_t> expert_tokens;  // MoE: tokens each routed expert took in the last step, all layers
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
  int64_t id;
  int32_t token;  // -1 when the request ended without a new token (cancelled)
  FinishReason finish;
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them
  std::optional<RequestMetrics> metrics;  // with the last output of a request
  std::vector<TokenLogprobs> prompt_logprobs;  // with the first token: prompt tokens 1.. (prompt_logprobs >= 0)
  std::vector<float> embedding;                // an embedding request's result, with its only output
};

class EngineCore {
 public:
  // end_of_generation: token ids that end a reply (the tokenizer's).
  EngineCore(Model& model, KvCache& memory, const EngineCoreConfig& config, std::vector<int32_t> end_of_generation);

  // Queues a request; the error says why it can never run.
  Result<int64_t> add(std::vector<int32_t> prompt, const GenerationParams& params);
  // Ends a request before its next step; its pages are freed at once.
  void cancel(int64_t id);
  // Ends a request now (a stop string matched its text) and says how it went.
  RequestMetrics finish_now(int64_t id) { return end(id); }
  // Runs one step. Empty when there was nothing to do.
  Result<std::vector<StepOutput>> step();

  bool idle() const { return requests_.empty(); }
  EngineStats stats() const;
  // The profiler of this core's steps (its stages, the forward's layers and
  // ops); the caller brackets each step with begin_step/end_step.
  StepTrace& trace() { return trace_; }
  const BlockPool& pool() const { return pool_; }
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    Sequence seq;
    GenerationParams params;
    Sampler sampler;
    Clock::time_point added, scheduled, first_token, last_token;
    bool started = false;
    std::vector<TokenLogprobs> prompt_logprobs;  // filled as the prompt is computed (kept across preemption)
    std::vector<double> pooled;                  // embedding: the sum of the hidden states taken so far
    int32_t n_pooled = 0;                        // ... over this many positions (mean: positions 0..n_pooled-1)
  };
  // Removes a request and says how it went.
  RequestMetrics end(int64_t id);
  StepOutput embedding_output(int64_t id);
  // Sets each decoding sequence's draft for this step (speculation on).
  void propose_drafts();

  Model& model_;
  KvCache& memory_;
  ModelRunner runner_;
  BlockPool pool_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  std::vector<int32_t> end_of_generation_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;
  std::vector<int64_t> cancelled_;
  int64_t next_id_ = 1;
  int64_t steps_ = 0, step_tokens_ = 0;
  int32_t last_step_tokens_ = 0;
  double last_step_seconds_ = 0.0;
  double grammar_mask_seconds_ = 0.0;
  SpeculationConfig speculation_;
  DraftModel* draft_model_;
  int64_t drafts_ = 0, draft_tokens_ = 0, accepted_draft_tokens_ = 0;
  StepTrace trace_;
};

}  // namespace ds
