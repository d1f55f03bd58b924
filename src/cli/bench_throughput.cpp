#include "cli/bench_throughput.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <unordered_map>

#include "engine/engine_core.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, size_t(p / 100.0 * double(values.size())));
  return values[index];
}

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer bench: %s\n", message.c_str());
  return 1;
}

}  // namespace

int run_throughput_bench(const Args& a, const CommonModelOptions& options) {
  const int64_t concurrency = std::atoll(a.get("--concurrency", "1").c_str());
  const int64_t n_requests = std::atoll(a.get("--requests", std::to_string(std::max<int64_t>(4 * concurrency, 8))).c_str());
  const int32_t prompt_len = std::atoi(a.get("--prompt-len", "128").c_str());
  const int32_t gen_len = std::atoi(a.get("--gen-len", "128").c_str());
  const int32_t budget = std::atoi(a.get("--max-num-batched-tokens", "512").c_str());
  if (concurrency < 1 || n_requests < 1 || prompt_len < 1 || gen_len < 1 || budget < 1) {
    return fail("--concurrency, --requests, --prompt-len, --gen-len and --max-num-batched-tokens must be positive");
  }
  auto model = Model::load(options.path, options.model);
  if (!model.ok()) return fail(model.message());
  Model& m = *model.value();
  KvCacheOptions kv = options.kv;
  const int64_t pages_per_request = (prompt_len + gen_len + kv.page_tokens - 1) / kv.page_tokens;
  kv.n_pages = pages_per_request * concurrency + 1;
  auto memory = KvCache::create(m.config(), kv);
  if (!memory.ok()) return fail(memory.message());
  EngineCoreConfig config;
  config.scheduler = SchedulerConfig{budget, int32_t(concurrency), prompt_len + gen_len};
  EngineCore core(m, *memory.value(), config, {});

  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(0, int32_t(m.config().n_vocab - 1));
  GenerationParams params;
  params.sampling.temperature = 0.0f;
  params.max_tokens = gen_len;
  params.stop_at_end_of_generation = false;

  struct Timing {
    Clock::time_point added, first, last;
    int32_t n_out = 0;
  };
  std::unordered_map<int64_t, Timing> timings;
  std::vector<double> ttft, tpot;
  int64_t submitted = 0, finished = 0, output_tokens = 0, steps = 0, step_tokens = 0;
  auto submit = [&] {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int32_t& t : prompt) t = token(rng);
    auto id = core.add(std::move(prompt), params);
    if (!id.ok()) return false;
    timings[id.value()].added = Clock::now();
    ++submitted;
    return true;
  };
  {  // warm-up: page faults and thread start-up are not part of the figures
    auto id = core.add(std::vector<int32_t>(size_t(std::min(prompt_len, 8)), 1), GenerationParams{params.sampling, 2, false});
    if (!id.ok()) return fail(id.message());
    while (!core.idle()) (void)core.step();
  }
  const Clock::time_point start = Clock::now();
  while (finished < n_requests) {
    while (submitted < n_requests && submitted - finished < concurrency) {
      if (!submit()) return fail("a request was rejected");
    }
    auto outputs = core.step();
    if (!outputs.ok()) return fail(outputs.message());
    ++steps;
    const Clock::time_point now = Clock::now();
    for (const StepOutput& o : outputs.value()) {
      Timing& t = timings[o.id];
      if (t.n_out++ == 0) t.first = now;
      t.last = now;
      ++output_tokens;
      if (o.finish == FinishReason::none) continue;
      ++finished;
      ttft.push_back(std::chrono::duration<double, std::milli>(t.first - t.added).count());
      if (t.n_out > 1) tpot.push_back(std::chrono::duration<double, std::milli>(t.last - t.first).count() / (t.n_out - 1));
      timings.erase(o.id);
    }
    step_tokens += int64_t(outputs.value().size());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const EngineStats stats = core.stats();
  std::printf("concurrency %lld, %lld requests, prompt %d, output %d tokens, %d threads\n", (long long)concurrency,
              (long long)n_requests, prompt_len, gen_len, m.pool().n_threads());
  std::printf("request throughput: %.3f req/s\n", double(n_requests) / seconds);
  std::printf("output tokens/s: %.2f\n", double(output_tokens) / seconds);
  std::printf("TTFT ms: p50 %.1f p90 %.1f p99 %.1f\n", percentile(ttft, 50), percentile(ttft, 90), percentile(ttft, 99));
  std::printf("TPOT ms: p50 %.1f p90 %.1f p99 %.1f\n", percentile(tpot, 50), percentile(tpot, 90), percentile(tpot, 99));
  std::printf("steps: %lld, sampled tokens per step %.2f\n", (long long)steps, double(step_tokens) / double(steps));
  std::printf("KV pool: %d pages of %lld tokens (%.2f MiB each across layers), %d held at the end; %lld preemptions\n",
              stats.pages_total, (long long)kv.page_tokens, double(stats.page_bytes) / 1048576.0, stats.pages_held,
              (long long)stats.n_preemptions);
  std::printf("prefix cache: %lld of %lld prompt tokens hit\n", (long long)stats.prefix_hit_tokens,
              (long long)stats.prefix_query_tokens);
  return 0;
}

}  // namespace ds
