#pragma once
// Continuous batching: every step, all running sequences' next tokens plus
// prefill chunks of waiting ones, within a token budget and a sequence cap.
//
// The scheduler speaks tokens, not phases (STYLE.md practice 5): a sequence
// has `tokens` (prompt, then generated) and `n_computed` (those whose keys and
// values are cached); a step computes the next chunk of the rest. A decode is
// a chunk of one. When pages run out, the most recently admitted sequence is
// preempted: its pages are freed and it waits again at the front, to be
// recomputed (cheaply, through the prefix cache).
//
// Priorities (lower runs first; the server's batch lines run after every
// online request): the victim of a preemption is the newest sequence of the
// worst priority running; a waiting sequence takes a slot or pages from
// running ones of a worse priority; and a step that computes a prompt of a
// better priority carries nothing of a worse one. So online time to first
// token neither waits for batch work nor shares a step with it; and a step
// of worse work already running yields at its next layer
// (EngineCore::request_yield) when a better request arrives. A decode step may carry
// draft tokens to verify (speculative decoding): they get what budget and
// free pages the step has left after every running sequence's own token and
// before waiting prompts, and never preempt; the pages they took stay with
// their sequence, which fills them next.
//
//   add() ──► waiting ──schedule()──► running ──finish()──► (gone)
//                ▲                       │
//                └────── preempted ──────┘

#include <cstdint>
#include <deque>
#include <vector>

#include "base/status.h"
#include "engine/admission_rule.h"
#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"

namespace ds {

struct SchedulerConfig {
  int32_t max_batched_tokens = 512;  // tokens per step, all sequences together
  int32_t max_running = 64;          // sequences running at once
  int32_t max_context = 4096;        // prompt plus output, per sequence
  // A fraction of the pool a new prompt leaves free for the running ones to
  // grow into (admission_rule.h); serving keeps 5%.
  double kv_reserve = 0.0;
};

struct ScheduledChunk {
  Sequence* seq;
  int32_t n_tokens;     // computes tokens [seq->n_computed, seq->n_computed + n_tokens)
  int32_t n_draft = 0;  // ... then the first n_draft of seq->draft (a decode step's, n_tokens == 1)
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;
  int32_t n_tokens() const {
    int32_t n = 0;
    for (const ScheduledChunk& c : chunks) n += c.n_tokens + c.n_draft;
    return n;
  }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);

  // The rule add() applies; a copy may be asked from any thread.
  const AdmissionRule& admission_rule() const { return rule_; }
  // Queues a sequence, or says why it can never run (admission_rule.h).
  Status add(Sequence* seq);
  // Plans the next step and allocates its pages. Empty when nothing can run.
  StepPlan schedule();
  // Removes a sequence (finished or cancelled) wherever it is; frees its pages.
  void finish(Sequence* seq);

  int32_t n_waiting() const { return int32_t(waiting_.size()); }
  int32_t n_running() const { return int32_t(running_.size()); }
  // Tokens looked up in the prefix cache at admission, and those found, summed.
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  // KV slots allocated to running sequences that hold no token yet, as a
  // fraction of all their allocated slots (0 when nothing runs).
  double fragmentation() const;
  int64_t n_preemptions() const { return n_preemptions_; }

 private:
  void preempt(Sequence* seq);
  // The newest running sequence of the worst priority above `worse_than`, or null.
  Sequence* victim(int32_t worse_than) const;
  void preempt_into(Sequence* seq, StepPlan& plan);
  // Tries to give `seq` room for `n_tokens` more tokens, preempting the
  // victims as needed; false if `seq` itself had to go.
  bool make_room(Sequence* seq, int32_t n_tokens, StepPlan& plan);
  // Moves the first waiting sequence into the step with up to `budget`
  // tokens, or says false (it stays first in line).
  bool admit_waiting(int32_t budget, StepPlan& plan);
  bool is_running(const Sequence* seq) const;
  void insert_waiting(Sequence* seq, bool at_front);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  AdmissionRule rule_;
  std::deque<Sequence*> waiting_;   // by priority, then arrival (preempted first)
  std::vector<Sequence*> running_;  // in admission order
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t n_preemptions_ = 0;
};

}  // namespace ds
