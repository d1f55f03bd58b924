// Batching is invisible in the results: greedy outputs of concurrent requests
// on the real stories260K model equal each request run alone, with the prefix
// cache on and off, at several chunk budgets and page sizes, and with
// sequences preempted and recomputed under a tiny page pool.

#include "engine/engine_core.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace ds {
namespace {

const std::string k_stories = std::string(DSINFER_FIXTURES) + "/models/stories260K.gguf";

struct RunShape {
  int32_t page_tokens = 16;
  int32_t n_pages = 256;
  int32_t max_batched_tokens = 512;
  bool prefix_cache = true;
};

std::vector<std::vector<int32_t>> prompts() {
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> out;
  const std::vector<int32_t> shared = {1, 403, 407, 261, 378, 30, 85, 90, 272, 336, 13, 52, 100, 7, 402, 9, 44, 98, 120};
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> p = i % 3 == 0 ? shared : std::vector<int32_t>{1};  // some share a prefix
    const int extra = 2 + int(rng() % 40);
    for (int k = 0; k < extra; ++k) p.push_back(3 + int32_t(rng() % 500));
    out.push_back(p);
  }
  return out;
}

// Runs the prompts concurrently (or one at a time) to completion; returns
// each prompt's generated tokens.
struct RunStats {
  int64_t prefix_hits = 0;
  int64_t preemptions = 0;
};

std::vector<std::vector<int32_t>> generate(Model& model, const RunShape& s, bool one_at_a_time, RunStats* stats = nullptr) {
  auto memory = KvCache::create(model.config(), KvCacheOptions{DType::f16, s.page_tokens, s.n_pages});
  EXPECT_TRUE(memory.ok());
  EngineCoreConfig config;
  config.scheduler = SchedulerConfig{s.max_batched_tokens, 16, 512};
  config.prefix_cache = s.prefix_cache;
  EngineCore core(model, *memory.value(), config, {});
  GenerationParams params;
  params.sampling.temperature = 0.0f;
  params.max_tokens = 24;
  params.stop_at_end_of_generation = false;
  const auto all = prompts();
  std::map<int64_t, size_t> index_of;
  std::vector<std::vector<int32_t>> outputs(all.size());
  auto drain = [&] {
    while (!core.idle()) {
      auto step = core.step();
      EXPECT_TRUE(step.ok()) << step.message();
      const EngineStats stats = core.stats();
      EXPECT_GE(stats.fragmentation, 0.0);
      EXPECT_LT(stats.fragmentation, 1.0);
      EXPECT_LE(stats.last_step_tokens, s.max_batched_tokens);
      EXPECT_LE(stats.pages_held, stats.pages_total);
      for (const StepOutput& o : step.value()) outputs[index_of[o.id]].push_back(o.token);
      EXPECT_TRUE(core.pool().check_invariants().ok());
    }
  };
  for (size_t i = 0; i < all.size(); ++i) {
    auto id = core.add(all[i], params);
    EXPECT_TRUE(id.ok()) << id.message();
    index_of[id.value()] = i;
    if (one_at_a_time) drain();
  }
  drain();
  const EngineStats end = core.stats();
  EXPECT_EQ(end.pages_held, 0);
  EXPECT_EQ(end.n_running + end.n_waiting, 0);
  EXPECT_LE(end.prefix_hit_tokens, end.prefix_query_tokens);
  if (stats) *stats = RunStats{end.prefix_hit_tokens, end.n_preemptions};
  EXPECT_EQ(core.pool().n_unheld(), s.n_pages) << "pages left held";
  return outputs;
}

class EngineCoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto loaded = Model::load(k_stories, ModelOptions{2, LoadMode::mmap});
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    model_ = loaded.take().release();
    reference_ = new std::vector<std::vector<int32_t>>(generate(*model_, RunShape{16, 256, 512, false}, true));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete model_;
  }
  static Model* model_;
  static std::vector<std::vector<int32_t>>* reference_;
};
Model* EngineCoreTest::model_ = nullptr;
std::vector<std::vector<int32_t>>* EngineCoreTest::reference_ = nullptr;

TEST_F(EngineCoreTest, ConcurrentRequestsEqualSingleRuns) {
  for (const RunShape& s : {RunShape{16, 256, 512, true}, RunShape{16, 256, 512, false}, RunShape{16, 256, 7, true},
                         RunShape{16, 256, 33, false}, RunShape{1, 4096, 64, true}, RunShape{4, 1024, 64, true},
                         RunShape{64, 64, 512, true}}) {
    const auto outputs = generate(*model_, s, false);
    for (size_t i = 0; i < outputs.size(); ++i) {
      ASSERT_EQ(outputs[i], (*reference_)[i]) << "prompt " << i << " page " << s.page_tokens << " budget "
                                              << s.max_batched_tokens << " prefix cache " << s.prefix_cache;
    }
  }
}

TEST_F(EngineCoreTest, PreemptedAndRecomputedSequencesGiveTheSameTokens) {
  // 12 pages of 4 tokens: 16 requests of up to ~85 tokens cannot all stay resident.
  RunStats stats;
  const auto outputs = generate(*model_, RunShape{4, 24, 32, true}, false, &stats);
  EXPECT_GT(stats.preemptions, 0) << "the pool was meant to be too small";
  for (size_t i = 0; i < outputs.size(); ++i) ASSERT_EQ(outputs[i], (*reference_)[i]) << "prompt " << i;
}

TEST_F(EngineCoreTest, SharedPrefixesAreReused) {
  RunStats stats;
  generate(*model_, RunShape{4, 256, 512, true}, true, &stats);
  EXPECT_GT(stats.prefix_hits, 0);
  generate(*model_, RunShape{4, 256, 512, false}, true, &stats);
  EXPECT_EQ(stats.prefix_hits, 0);
}

}  // namespace
}  // namespace ds
