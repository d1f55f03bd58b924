#include "engine/scheduler.h"

#include <algorithm>

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

bool Scheduler::make_room(Sequence* seq, int32_t n_tokens, StepPlan& plan) {
  while (!kv_.can_grow(seq->id, seq->n_computed + n_tokens)) {
    Sequence* victim = running_.back();
    // A victim already planned into this step loses its chunk too.
    plan.chunks.erase(std::remove_if(plan.chunks.begin(), plan.chunks.end(),
                                     [&](const ScheduledChunk& c) { return c.seq == victim; }),
                      plan.chunks.end());
    preempt(victim);
    plan.preempted.push_back(victim);
    if (victim == seq) return false;
  }
  kv_.grow(seq->id, seq->n_computed + n_tokens);
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int32_t budget = config_.max_batched_tokens;

  // Running sequences first, oldest admission first.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    const int32_t n = std::min<int32_t>(int32_t(seq->tokens.size()) - seq->n_computed, budget);
    if (n <= 0) continue;
    if (!make_room(seq, n, plan)) break;  // seq was the newest: nothing after it is left
    plan.chunks.push_back({seq, n});
    budget -= n;
  }
  // Drafts of decode steps, in admission order, within what is left.
  for (ScheduledChunk& chunk : plan.chunks) {
    Sequence* seq = chunk.seq;
    if (budget <= 0) break;
    if (chunk.n_tokens != 1 || seq->n_computed + 1 != int32_t(seq->tokens.size()) || seq->draft.empty()) continue;
    int32_t n = std::min<int32_t>(int32_t(seq->draft.size()), budget);
    while (n > 0 && !kv_.can_grow(seq->id, seq->n_computed + 1 + n)) --n;
    if (n == 0) continue;
    kv_.grow(seq->id, seq->n_computed + 1 + n);
    chunk.n_draft = n;
    budget -= n;
  }
  budget = config_.max_batched_tokens - plan.n_tokens();

  // Then waiting ones, in order, while there is budget and room; never when
  // this step had to preempt (the freed pages go to those already running).
  while (plan.preempted.empty() && budget > 0 && !waiting_.empty() && int32_t(running_.size()) < config_.max_running) {
    Sequence* seq = waiting_.front();
    seq->n_computed = kv_.start(seq->id, seq->tokens, seq->tenant_salt, seq->reuse_prefix);
    const int32_t n = std::min<int32_t>(int32_t(seq->tokens.size()) - seq->n_computed, budget);
    if (!kv_.can_grow(seq->id, seq->n_computed + n)) {
      kv_.free(seq->id);  // give the prefix pages back; it stays first in line
      seq->n_computed = 0;
      break;
    }
    kv_.grow(seq->id, seq->n_computed + n);
    prefix_query_tokens_ += int64_t(seq->tokens.size());
    prefix_hit_tokens_ += seq->n_computed;
    if (seq->n_cached_prompt < 0) seq->n_cached_prompt = seq->n_computed;
    waiting_.pop_front();
    running_.push_back(seq);
    plan.chunks.push_back({seq, n});
    budget -= n;
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
