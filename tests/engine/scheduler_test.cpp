// The scheduler driven by a stand-in for the engine: each step's chunks are
// "computed" (n_computed advances, full pages are committed) and a sequence
// whose tokens are all computed gets a new token that depends only on its own
// history, as a greedy model would. So a sequence's output must not depend on
// what else ran, on chunking, or on preemption.

#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

namespace ds {
namespace {

int32_t next_token(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ uint64_t(t)) * 1099511628211ull;
  return int32_t(h % 1000);
}

std::vector<int32_t> alone(const std::vector<int32_t>& p, int32_t max_new) {
  std::vector<int32_t> tokens = p;
  for (int32_t i = 0; i < max_new; ++i) tokens.push_back(next_token(tokens));
  return std::vector<int32_t>(tokens.begin() + int64_t(p.size()), tokens.end());
}

struct Harness {
  BlockPool pool;
  KvCacheManager kv;
  Scheduler scheduler;
  std::vector<std::unique_ptr<Sequence>> sequences;
  std::map<int64_t, std::vector<int32_t>> outputs;  // finished sequences' generated tokens
  int64_t steps = 0;

  Harness(int32_t n_pages, int32_t page_tokens, SchedulerConfig config)
      : pool(n_pages), kv(pool, page_tokens, 1), scheduler(config, kv) {}

  Sequence* add(std::vector<int32_t> prompt, int32_t max_new, int32_t priority = 0) {
    auto seq = std::make_unique<Sequence>();
    seq->id = int64_t(sequences.size());
    seq->n_prompt = int32_t(prompt.size());
    seq->tokens = std::move(prompt);
    seq->max_new_tokens = max_new;
    seq->priority = priority;
    EXPECT_TRUE(scheduler.add(seq.get()).ok());
    sequences.push_back(std::move(seq));
    return sequences.back().get();
  }

  // One engine step; returns the plan it ran.
  StepPlan step() {
    StepPlan plan = scheduler.schedule();
    ++steps;
    for (const ScheduledChunk& c : plan.chunks) {
      Sequence* seq = c.seq;
      seq->n_computed += c.n_tokens;
      kv.commit(seq->id, seq->tokens, seq->n_computed);
      if (seq->n_computed < int32_t(seq->tokens.size())) continue;
      seq->tokens.push_back(next_token(seq->tokens));
      if (int32_t(seq->tokens.size()) - seq->n_prompt == seq->max_new_tokens) {
        outputs[seq->id].assign(seq->tokens.begin() + seq->n_prompt, seq->tokens.end());
        scheduler.finish(seq);
      }
    }
    return plan;
  }

  // Runs to the end; every sequence's output is what it would be alone.
  void run_to_end_as_alone() {
    run_to_end();
    for (const auto& seq : sequences) {
      const std::vector<int32_t> its_prompt(seq->tokens.begin(), seq->tokens.begin() + seq->n_prompt);
      EXPECT_EQ(outputs[seq->id], alone(its_prompt, seq->max_new_tokens)) << "sequence " << seq->id;
    }
  }

  void run_to_end(int64_t max_steps = 100000) {
    while ((scheduler.n_running() > 0 || scheduler.n_waiting() > 0) && steps < max_steps) {
      step();
      ASSERT_TRUE(pool.check_invariants().ok()) << pool.check_invariants().message();
    }
    ASSERT_EQ(scheduler.n_running() + scheduler.n_waiting(), 0) << "did not finish";
  }
};

std::vector<int32_t> prompt(int32_t n, int32_t seed) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < n; ++i) tokens.push_back((seed * 7919 + i * 31) % 1000);
  return tokens;
}

TEST(Scheduler, LongPromptsArriveInChunksWhileOthersKeepDecoding) {
  Harness h(64, 4, SchedulerConfig{16, 8, 512});
  Sequence* short_one = h.add(prompt(3, 1), 50);
  h.step();  // the short prompt is prefilled
  Sequence* long_one = h.add(prompt(100, 2), 5);
  for (int i = 0; i < 6; ++i) {
    const StepPlan plan = h.step();
    ASSERT_LE(plan.n_tokens(), 16);
    bool short_decoded = false;
    for (const ScheduledChunk& c : plan.chunks) short_decoded |= c.seq == short_one && c.n_tokens == 1;
    EXPECT_TRUE(short_decoded) << "step " << i << ": the running sequence must decode every step";
  }
  EXPECT_GT(long_one->n_computed, 0);
  EXPECT_LT(long_one->n_computed, 100);
  h.run_to_end();
  EXPECT_EQ(h.outputs[short_one->id], alone(prompt(3, 1), 50));
  EXPECT_EQ(h.outputs[long_one->id], alone(prompt(100, 2), 5));
}

TEST(Scheduler, PreemptionUnderATinyPoolChangesNoOutput) {
  Harness h(12, 4, SchedulerConfig{32, 8, 64});  // 48 slots for 6 sequences of up to 30 tokens
  for (int32_t s = 0; s < 6; ++s) h.add(prompt(6 + s, s), 20);
  h.run_to_end();
  int32_t preemptions = 0;
  for (const auto& seq : h.sequences) {
    preemptions += seq->n_preemptions;
    EXPECT_EQ(h.outputs[seq->id], alone(prompt(6 + int32_t(seq->id), int32_t(seq->id)), 20)) << seq->id;
  }
  EXPECT_GT(preemptions, 0) << "the pool was meant to be too small";
  EXPECT_EQ(h.pool.n_unheld(), 12);
}

TEST(Scheduler, RequestsThatCanNeverFitAreRejectedAtAdd) {
  BlockPool pool(8);
  KvCacheManager kv(pool, 4, 1);
  Scheduler scheduler(SchedulerConfig{16, 4, 100}, kv);
  Sequence too_long{.id = 1, .tokens = prompt(90, 1), .n_prompt = 90, .max_new_tokens = 20};
  const Status context = scheduler.add(&too_long);
  ASSERT_FALSE(context.ok());
  EXPECT_NE(context.message().find("context is 100 tokens"), std::string::npos) << context.message();
  Sequence too_big{.id = 2, .tokens = prompt(30, 1), .n_prompt = 30, .max_new_tokens = 10};
  const Status pool_size = scheduler.add(&too_big);
  ASSERT_FALSE(pool_size.ok());
  EXPECT_NE(pool_size.message().find("KV pages"), std::string::npos);
}

TEST(Scheduler, PriorityThenArrivalOrder) {
  Harness h(64, 4, SchedulerConfig{8, 1, 512});  // one at a time
  Sequence* late_low = h.add(prompt(4, 1), 1, /*priority=*/5);
  Sequence* urgent = h.add(prompt(4, 2), 1, /*priority=*/0);
  Sequence* urgent_second = h.add(prompt(4, 3), 1, /*priority=*/0);
  std::vector<int64_t> order;
  while (h.scheduler.n_running() + h.scheduler.n_waiting() > 0) {
    for (const ScheduledChunk& c : h.step().chunks) order.push_back(c.seq->id);
  }
  EXPECT_EQ(order, (std::vector<int64_t>{urgent->id, urgent_second->id, late_low->id}));
}

// A better priority arriving while every slot runs worse ones takes a slot:
// the newest of the worst is preempted, and no output changes.
TEST(Scheduler, AWaitingBetterPriorityPreemptsForASlot) {
  Harness h(64, 4, SchedulerConfig{16, 2, 512});
  h.add(prompt(4, 1), 30, /*priority=*/1);
  Sequence* batch_b = h.add(prompt(4, 2), 30, /*priority=*/1);
  h.step();
  h.step();
  Sequence* online = h.add(prompt(4, 3), 5, /*priority=*/0);
  const StepPlan plan = h.step();
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0], batch_b) << "the newest of the worst priority goes";
  bool online_ran = false;
  for (const ScheduledChunk& c : plan.chunks) online_ran |= c.seq == online;
  EXPECT_TRUE(online_ran);
  h.run_to_end_as_alone();
}

// A step computing a better priority's prompt carries nothing of a worse
// one: the better prompt is computed whole in its first step, alone.
TEST(Scheduler, AStepComputingABetterPromptCarriesNothingWorse) {
  Harness h(128, 4, SchedulerConfig{16, 8, 512});
  Sequence* batch = h.add(prompt(200, 1), 3, /*priority=*/1);
  h.step();
  Sequence* online = h.add(prompt(12, 2), 3, /*priority=*/0);
  const StepPlan plan = h.step();
  ASSERT_FALSE(plan.chunks.empty());
  EXPECT_EQ(plan.chunks[0].seq, online);
  EXPECT_EQ(plan.chunks[0].n_tokens, 12);
  int32_t batch_tokens = 0;
  for (const ScheduledChunk& c : plan.chunks) batch_tokens += c.seq == batch ? c.n_tokens : 0;
  EXPECT_EQ(batch_tokens, 0);
  const StepPlan next = h.step();  // the online sequence decodes; the batch prompt goes on beside it
  ASSERT_EQ(next.chunks.size(), 2u);
  EXPECT_EQ(next.chunks[0].seq, online);
  EXPECT_EQ(next.chunks[1].seq, batch);
  EXPECT_EQ(next.chunks[1].n_tokens, 15);
  h.run_to_end_as_alone();
}

// A better priority takes pages from worse running ones; equal priorities
// never preempt each other for a waiting one.
TEST(Scheduler, AWaitingBetterPriorityPreemptsForPages) {
  Harness h(10, 4, SchedulerConfig{64, 8, 64});  // 40 slots
  Sequence* batch = h.add(prompt(30, 1), 4, /*priority=*/1);
  h.step();
  Sequence* online = h.add(prompt(20, 2), 4, /*priority=*/0);
  Sequence* online_second = h.add(prompt(30, 3), 4, /*priority=*/0);
  const StepPlan plan = h.step();
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0], batch);
  EXPECT_GT(online->n_computed, 0);
  EXPECT_EQ(online_second->n_computed, 0) << "waits for pages: its equal is never preempted for it";
  h.run_to_end_as_alone();
}

// Thousands of sequences of random lengths and two priorities, some cancelled mid-way, against a
// small pool: after every step every page is free, cached or held by live
// sequences only, and at the end nothing is held.
TEST(Scheduler, RandomWorkloadLosesNoPage) {
  Harness h(40, 4, SchedulerConfig{24, 12, 96});
  std::mt19937 rng(99);
  int32_t added = 0;
  while (added < 3000 || h.scheduler.n_running() + h.scheduler.n_waiting() > 0) {
    for (int k = 0; k < 3 && added < 3000; ++k, ++added) {
      h.add(prompt(1 + int32_t(rng() % 40), int32_t(rng() % 5)), 1 + int32_t(rng() % 30), /*priority=*/int32_t(rng() % 2));
    }
    h.step();
    if (rng() % 4 == 0) {  // a client goes away
      Sequence* victim = h.sequences[rng() % h.sequences.size()].get();
      if (!h.outputs.count(victim->id)) h.scheduler.finish(victim);
    }
    const Status status = h.pool.check_invariants();
    ASSERT_TRUE(status.ok()) << status.message();
    int32_t held = 0;
    for (int32_t p = 0; p < h.pool.n_pages(); ++p) held += h.pool.ref_count(p) > 0;
    ASSERT_EQ(held, h.pool.n_pages() - h.pool.n_unheld());
    ASSERT_LT(h.steps, 200000);
  }
  EXPECT_EQ(h.kv.n_sequences(), 0);
  EXPECT_EQ(h.pool.n_unheld(), h.pool.n_pages());
}

}  // namespace
}  // namespace ds
