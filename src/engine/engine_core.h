#pragma once
// One engine step at a time, single-threaded, as a list of named stages
// (step()). Each kind of request is handled in the stage it concerns:
// generation in build_batch (its last position's logits) and sample; drafts
// in propose_drafts, schedule (room for them) and sample (verified), the
// multi-token-prediction drafter's hidden states in build_batch and commit;
// prompt logprobs in build_batch and commit (scored); embeddings in
// build_batch and commit (pooled, finished); grammars in mask_grammar and
// sample (the token accepted). Whether a token ends its request (an end or
// stop token, max_tokens, a stop string) is decided in one place,
// Request::append. The serving Engine runs this on its own thread
// and feeds it from the request queue; tests and offline tools drive it
// directly. It owns the page pool, the KV manager and the scheduler; the
// model and its KV page memory are lent to it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <atomic>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/block_pool.h"
#include "engine/draft_model.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_disk_tier.h"
#include "engine/model_runner.h"
#include "engine/mtp_drafter.h"
#include "engine/ngram_drafter.h"
#include "engine/request.h"
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
  // Or by the model file's multi-token-prediction layer, whose rows the
  // model's KV pages hold (engine/mtp_drafter.h); not owned, outlives the core.
  MtpDrafter* mtp_drafter = nullptr;
  // The prefix cache's disk tier (kv_disk_tier.h), or null; not owned, outlives the core.
  KvDiskTier* kv_disk = nullptr;
  // Tensor parallel: where the steps go, and as which version (step_broadcast.h).
  RankSteps ranks;
};

// What drafts under `config`, as reports name it.
const char* drafter_name(const EngineCoreConfig& config);

// A snapshot of the engine for operators (the server exports it as metrics).
struct EngineStats {
  int32_t n_running = 0;
  int32_t n_waiting = 0;
  int64_t n_preemptions = 0;
  int32_t pages_total = 0;
  int32_t pages_held = 0;    // held by at least one sequence
  int32_t pages_cached = 0;  // registered in the prefix cache (held or not)
  int64_t page_bytes = 0;    // one page across all layers, keys and values
  int32_t window_pages_total = 0;  // the window pool (KvStream::windowed), 0: none
  int32_t window_pages_held = 0;
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
  int64_t yielded_steps = 0;          // steps dropped for a better priority (request_yield)
  std::vector<int64_t> expert_tokens;  // MoE: tokens each routed expert took in the last step, all layers
  std::optional<KvDiskTierStats> kv_disk;  // with a disk tier
};

class EngineCore {
 public:
  // tokenizer: the model's (its end-of-generation tokens end replies; replies
  // come with their text, and stop strings end them); null: token ids only,
  // no end tokens, and stop strings are refused.
  EngineCore(Model& model, KvCache& memory, const EngineCoreConfig& config, const Tokenizer* tokenizer);

  // Queues a request; the error says why it can never run.
  Result<int64_t> add(std::vector<int32_t> prompt, const GenerationParams& params);
  // Ends a request before its next step; its pages are freed at once.
  void cancel(int64_t id);
  // From any thread: a request of `priority` is on its way. A step running
  // only worse priorities stops at its next layer boundary and computes
  // nothing (its sequences run again), so the new request waits for a layer,
  // not a step. Not for steps with drafts, windowed streams or tensor
  // parallel ranks (each keeps state a dropped step would corrupt).
  // Asked between steps, it applies to the next step (the request came after
  // the step's requests were taken).
  void request_yield(int32_t priority) {
    int32_t pending = pending_yield_.load(std::memory_order_relaxed);
    while (priority < pending && !pending_yield_.compare_exchange_weak(pending, priority)) {
    }
    if (priority < step_priority_.load(std::memory_order_acquire)) yield_.store(true, std::memory_order_release);
  }
  // Runs one step: end the cancelled, schedule, build the batch, run the
  // model, commit what it computed, mask, sample or verify (each token's text
  // and whether it ends its request decided there), count. Empty when there
  // was nothing to do.
  Result<std::vector<StepOutput>> step();

  bool idle() const { return requests_.empty(); }
  EngineStats stats() const;
  // The rule add() applies (admission_rule.h), for callers that ask before adding.
  const AdmissionRule& admission_rule() const { return scheduler_.admission_rule(); }
  // The profiler of this core's steps (its stages, the forward's layers and
  // ops); the caller brackets each step with begin_step/end_step.
  StepTrace& trace() { return trace_; }
  const BlockPool& pool() const { return pool_; }
  const BlockPool& window_pool() const { return window_pool_; }
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  using Clock = std::chrono::steady_clock;
  // What the step's forward is asked for, by the request that wants it: a
  // row of logits to sample from (row k of a speculative chunk verifies draft
  // token k; the last, k == n_draft, has no draft to check), a row of logits
  // that scores prompt token position + 1 (prompt_logprobs), or a final
  // hidden state to pool (embeddings). Rows index the runner's outputs.
  struct SampleRow {
    Request* request;
    int64_t logit_row;
    int32_t draft_row = 0;
    int32_t n_draft = 0;
    size_t n_allowed = 0;  // tokens the grammar leaves (set by mask_grammar; unconstrained: all)
  };
  struct ScoreRow {
    Request* request;
    int64_t logit_row;
    int32_t position;
  };
  struct HiddenRow {
    Request* request;
    int64_t hidden_row;
    int32_t position;
  };
  // A chunk's final hidden states, rows [hidden_row, hidden_row + n) for
  // positions [first_position, ...), for the multi-token-prediction drafter.
  struct NextnRows {
    int64_t id;
    int32_t first_position;
    int64_t hidden_row;
    int32_t n;
  };
  struct StepRows {
    std::vector<SampleRow> sample;
    std::vector<ScoreRow> score;
    std::vector<HiddenRow> pool;
    std::vector<NextnRows> nextn;
  };

  // The stages of step(), in order.
  void end_cancelled(std::vector<StepOutput>& outputs);
  void propose_drafts();  // speculation on: each decoding sequence's draft for this step
  StepPlan schedule(Clock::time_point now);
  StepRows build_batch(const StepPlan& plan);
  void commit(const StepPlan& plan, const StepRows& rows, std::vector<StepOutput>& outputs);
  void mask_grammar(StepRows& rows);
  void sample(const StepRows& rows, std::vector<StepOutput>& outputs);
  void count_step(const StepPlan& plan, Clock::time_point start);
  // Arms request_yield for the step about to run, where it may yield.
  void open_to_yield(const StepPlan& plan);

  // The output of a token sampled for `request`: its text, its logprobs, and
  // whether it ends the request (then with the metrics, and the request gone).
  StepOutput take_token(Request& request, int32_t token, const float* logits);
  // The pooled hidden state, L2-normalised, as an embedding request's only output.
  StepOutput embedding_output(Request& request);
  // Removes a request and says how it went.
  RequestMetrics end(int64_t id);
  // Before requests end: the drafter writes the rows of their last step,
  // which their pages carry into the prefix cache.
  void write_nextn_rows(const std::vector<int64_t>& ids);

  Model& model_;
  KvCache& memory_;
  ModelRunner runner_;
  BlockPool pool_;
  BlockPool window_pool_;  // empty where the model has no windowed streams
  KvCacheManager kv_;
  Scheduler scheduler_;
  const Tokenizer* tokenizer_;
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
  MtpDrafter* mtp_drafter_;
  KvDiskTier* kv_disk_ = nullptr;
  // request_yield's: the best priority of the step running (none while no step may yield), and the flag the forward reads.
  std::atomic<int32_t> step_priority_{std::numeric_limits<int32_t>::min()};
  std::atomic<int32_t> pending_yield_{std::numeric_limits<int32_t>::max()};  // the best priority asked since the last step began
  std::atomic<bool> yield_{false};
  int64_t yielded_steps_ = 0;
  int64_t drafts_ = 0, draft_tokens_ = 0, accepted_draft_tokens_ = 0;
  StepTrace trace_;
};

}  // namespace ds
