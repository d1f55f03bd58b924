// dsinfer bench: prompt processing and generation speed of one sequence, as
// llama-bench measures them: pp = N prompt tokens in one forward, tg = N
// single-token decode steps. Prints one line per test with the mean and spread.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "cli/bench_grammar.h"
#include "cli/bench_throughput.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/model_runner.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer bench: %s\n", message.c_str());
  return 1;
}

struct Timing {
  double mean = 0.0, stddev = 0.0;
};

Timing summarize(const std::vector<double>& rates) {
  Timing t;
  for (double r : rates) t.mean += r / double(rates.size());
  for (double r : rates) t.stddev += (r - t.mean) * (r - t.mean) / double(rates.size());
  t.stddev = std::sqrt(t.stddev);
  return t;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  auto values = model_value_options();
  values.merge(device_value_options());
  values.insert({"-p", "--n-prompt", "-n", "--n-gen", "-r", "--repetitions", "--concurrency", "--requests",
                 "--prompt-len", "--gen-len", "--max-num-batched-tokens", "--prompts", "--json-schema", "--trace"});
  auto args = Args::parse(argc, argv, values, model_flags());
  if (!args.ok()) return fail(args.message());
  // The device first: the threads started from here on inherit its cores.
  auto device = claim_device(args.value());
  if (!device.ok()) return fail(device.message());
  auto options = parse_model_options(args.value());
  if (!options.ok()) return fail(options.message());
  const Args& a = args.value();
  if (a.has("--trace") && !a.has("--concurrency")) {
    std::fprintf(stderr, "dsinfer bench: --trace records the batching engine's steps: give --concurrency too\n");
    return 1;
  }
  if (a.has("--concurrency")) return run_throughput_bench(a, options.value());
  if (a.has("--json-schema")) return run_grammar_bench(a, options.value());
  auto n_prompt_arg = a.get_int(a.has("-p") ? "-p" : "--n-prompt", 512);
  auto n_gen_arg = a.get_int(a.has("-n") ? "-n" : "--n-gen", 128);
  auto repetitions_arg = a.get_int(a.has("-r") ? "-r" : "--repetitions", 3);
  for (const Status& s : {n_prompt_arg.status(), n_gen_arg.status(), repetitions_arg.status()}) {
    if (!s.ok()) return fail(s.message());
  }
  const int64_t n_prompt = n_prompt_arg.value(), n_gen = n_gen_arg.value(), repetitions = repetitions_arg.value();
  if (n_prompt < 0 || n_gen < 0 || n_prompt > 1 << 20 || n_gen > 1 << 20 || repetitions < 1 || repetitions > 1000) {
    return fail("-p and -n must be 0..1048576, -r 1..1000");
  }

  auto model = Model::load(options.value().path, options.value().model);
  if (!model.ok()) return fail(model.message());
  Model& m = *model.value();
  KvCacheOptions kv = options.value().kv;
  kv.n_pages = (std::max(n_prompt, n_gen) + 1 + kv.page_tokens - 1) / kv.page_tokens;
  auto cache = KvCache::create(m.backend(), m.config(), kv);
  if (!cache.ok()) return fail(cache.message());
  std::vector<int32_t> pages(size_t(kv.n_pages));
  std::iota(pages.begin(), pages.end(), 0);
  ModelRunner runner(m, *cache.value());
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(0, int32_t(m.config().n_vocab - 1));
  std::vector<int32_t> tokens;

  // One forward of `n` tokens starting at `position`, logits for the last.
  auto forward = [&](int64_t n, int64_t position) {
    tokens.resize(size_t(n));
    for (int32_t& t : tokens) t = token(rng);
    runner.begin();
    runner.add(tokens.data(), int32_t(position), int32_t(n), {pages.data(), int32_t(pages.size())});
    runner.want_logits(int32_t(n - 1));
    return runner.run();
  };
  auto seconds_of = [](auto&& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  Status status = forward(1, 0);  // warm-up: page faults, thread start
  if (!status.ok()) return fail(status.message());
  const ModelOptions& mo = options.value().model;
  std::printf("model: %s, %s, backend %s, weights %s%s\n", options.value().path.c_str(), m.config().arch->name,
              m.backend().name().c_str(), mo.load_mode == LoadMode::mmap ? "mapped" : "copied (--no-mmap)",
              mo.interleave ? ", repacked where the backend has a layout" : " (--no-repack)");
  if (n_prompt > 0) {
    std::vector<double> rates;
    for (int64_t r = 0; r < repetitions && status.ok(); ++r) {
      rates.push_back(double(n_prompt) / seconds_of([&] { status = forward(n_prompt, 0); }));
    }
    const Timing t = summarize(rates);
    std::printf("pp%lld: %.2f ± %.2f tokens/s\n", (long long)n_prompt, t.mean, t.stddev);
  }
  if (n_gen > 0) {
    std::vector<double> rates;
    for (int64_t r = 0; r < repetitions && status.ok(); ++r) {
      rates.push_back(double(n_gen) / seconds_of([&] {
        for (int64_t i = 0; i < n_gen && status.ok(); ++i) status = forward(1, i);
      }));
    }
    const Timing t = summarize(rates);
    std::printf("tg%lld: %.2f ± %.2f tokens/s\n", (long long)n_gen, t.mean, t.stddev);
  }
  if (!status.ok()) return fail(status.message());
  return 0;
}

}  // namespace ds
