#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

namespace ds {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv)
    : config_(config),
      kv_(kv),
      rule_(config.max_context, kv.page_tokens(), kv.pool().n_pages(), config.kv_reserve,
            WindowLimits{kv.window_pool() ? kv.window_pool()->n_pages() : 0, kv.horizon(), config.max_batched_tokens}) {}

Status Scheduler::add(Sequence* seq) {
  if (seq->n_prompt <= 0 || int32_t(seq->tokens.size()) != seq->n_prompt || seq->max_new_tokens < 1) {
    return Status::error("request has an empty or inconsistent prompt, or no room for output");
  }
  const Admit admit = rule_.check(seq->n_prompt, seq->max_new_tokens, -1);
  if (!admit.fits()) return Status::error(admit.reason);
  insert_waiting(seq, false);
  return Status();
}

void Scheduler::insert_waiting(Sequence* seq, bool at_front) {
  // Stable by priority: a preempted sequence goes before its equals, a new one after.
  auto position = at_front ? std::find_if(waiting_.begin(), waiting_.end(),
                                          [&](const Sequence* s) { return s->priority >= seq->priority; })
                           : std::find_if(waiting_.begin(), waiting_.end(),
                                          [&](const Sequence* s) { return s->priority > seq->priority; });
  waiting_.insert(position, seq);
}

void Scheduler::preempt(Sequence* seq) {
  kv_.free(seq->id);
  seq->n_computed = 0;
  ++seq->n_preemptions;
  ++n_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  insert_waiting(seq, true);
}

Sequence* Scheduler::victim(int32_t worse_than) const {
  Sequence* chosen = nullptr;
  for (Sequence* seq : running_) {  // admission order: the last of the worst priority is the newest
    if (seq->priority > worse_than && (!chosen || seq->priority >= chosen->priority)) chosen = seq;
  }
  return chosen;
}

void Scheduler::preempt_into(Sequence* seq, StepPlan& plan) {
  // A sequence already planned into this step loses its chunk too.
  plan.chunks.erase(std::remove_if(plan.chunks.begin(), plan.chunks.end(), [&](const ScheduledChunk& c) { return c.seq == seq; }),
                    plan.chunks.end());
  preempt(seq);
  plan.preempted.push_back(seq);
}

bool Scheduler::make_room(Sequence* seq, int32_t n_tokens, StepPlan& plan) {
  while (!kv_.can_grow(seq->id, seq->n_computed + n_tokens)) {
    Sequence* chosen = victim(std::numeric_limits<int32_t>::min());
    preempt_into(chosen, plan);
    if (chosen == seq) return false;
  }
  kv_.grow(seq->id, seq->n_computed + n_tokens);
  return true;
}

bool Scheduler::is_running(const Sequence* seq) const { return std::find(running_.begin(), running_.end(), seq) != running_.end(); }

bool Scheduler::admit_waiting(int32_t budget, StepPlan& plan) {
  Sequence* seq = waiting_.front();
  // Never behind one of its own priority or better that this step preempted:
  // the pages freed go to those already running.
  for (const Sequence* p : plan.preempted) {
    if (p->priority <= seq->priority) return false;
  }
  while (int32_t(running_.size()) >= config_.max_running) {
    Sequence* chosen = victim(seq->priority);
    if (!chosen) return false;
    preempt_into(chosen, plan);
  }
  seq->n_computed = kv_.start(seq->id, seq->tokens, seq->tenant_salt, seq->reuse_prefix);
  const int32_t n = std::min<int32_t>(int32_t(seq->tokens.size()) - seq->n_computed, budget);
  while (!kv_.can_grow(seq->id, seq->n_computed + n)) {
    Sequence* chosen = victim(seq->priority);
    if (!chosen) {
      kv_.free(seq->id);  // give the prefix pages back; it stays first in line
      seq->n_computed = 0;
      return false;
    }
    preempt_into(chosen, plan);
  }
  kv_.grow(seq->id, seq->n_computed + n);
  prefix_query_tokens_ += int64_t(seq->tokens.size());
  prefix_hit_tokens_ += seq->n_computed;
  if (seq->n_cached_prompt < 0) seq->n_cached_prompt = seq->n_computed;
  waiting_.pop_front();
  running_.push_back(seq);
  plan.chunks.push_back({seq, n});
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  // The best priority with a prompt to compute (waiting, or running through
  // its prompt): sequences of a worse one are deferred after it.
  int32_t best_prompt = waiting_.empty() ? std::numeric_limits<int32_t>::max() : waiting_.front()->priority;
  for (const Sequence* seq : running_) {
    if (seq->n_computed < seq->n_prompt) best_prompt = std::min(best_prompt, seq->priority);
  }

  // Running sequences first, by priority, then oldest admission first.
  std::vector<Sequence*> deferred;
  std::vector<Sequence*> order = running_;
  std::stable_sort(order.begin(), order.end(), [](const Sequence* a, const Sequence* b) { return a->priority < b->priority; });
  for (Sequence* seq : order) {
    const int32_t budget = config_.max_batched_tokens - plan.n_tokens();
    if (budget <= 0) break;
    if (!is_running(seq)) continue;  // preempted for an earlier one's room
    const int32_t n = std::min<int32_t>(int32_t(seq->tokens.size()) - seq->n_computed, budget);
    if (n <= 0) continue;
    if (seq->priority > best_prompt) {
      deferred.push_back(seq);
      continue;
    }
    if (make_room(seq, n, plan)) plan.chunks.push_back({seq, n});
  }
  // Drafts of decode steps, in admission order, within what is left.
  for (ScheduledChunk& chunk : plan.chunks) {
    Sequence* seq = chunk.seq;
    const int32_t budget = config_.max_batched_tokens - plan.n_tokens();
    if (budget <= 0) break;
    if (chunk.n_tokens != 1 || seq->n_computed + 1 != int32_t(seq->tokens.size()) || seq->draft.empty()) continue;
    int32_t n = std::min<int32_t>(int32_t(seq->draft.size()), budget);
    while (n > 0 && !kv_.can_grow(seq->id, seq->n_computed + 1 + n)) --n;
    if (n == 0) continue;
    kv_.grow(seq->id, seq->n_computed + 1 + n);
    chunk.n_draft = n;
  }
  // Then waiting ones, in order, while there is budget and room; a waiting
  // sequence may preempt running ones of a worse priority for a slot or pages.
  while (!waiting_.empty()) {
    const int32_t budget = config_.max_batched_tokens - plan.n_tokens();
    if (budget <= 0 || !admit_waiting(budget, plan)) break;
  }
  // Last, the deferred ones, unless the step computes a better prompt: that
  // step is as short as it would be without them (its time to first token).
  for (Sequence* seq : deferred) {
    const int32_t budget = config_.max_batched_tokens - plan.n_tokens();
    if (budget <= 0) break;
    if (!is_running(seq)) continue;
    const bool better_prompt = std::any_of(plan.chunks.begin(), plan.chunks.end(), [&](const ScheduledChunk& c) {
      return c.seq->priority < seq->priority && c.seq->n_computed < c.seq->n_prompt;
    });
    if (better_prompt) continue;
    const int32_t n = std::min<int32_t>(int32_t(seq->tokens.size()) - seq->n_computed, budget);
    if (make_room(seq, n, plan)) plan.chunks.push_back({seq, n});
  }
  return plan;
}

double Scheduler::fragmentation() const {
  int64_t slots = 0, filled = 0;
  for (const Sequence* seq : running_) {
    slots += int64_t(kv_.block_table(seq->id).size()) * kv_.page_tokens();
    filled += seq->n_computed;
  }
  return slots == 0 ? 0.0 : 1.0 - double(filled) / double(slots);
}

void Scheduler::finish(Sequence* seq) {
  kv_.free(seq->id);
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
}

}  // namespace ds
