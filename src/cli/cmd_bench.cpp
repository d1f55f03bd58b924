// dsinfer bench: prompt processing and generation speed of one sequence, as
// llama-bench measures them: ppN = N prompt tokens in one forward, tgN = N
// single-token decode steps, each after a context of DEPTH tokens (-d: the
// cache filled once per depth, in chunks of 512, untimed), each after an
// untimed run of its shape (llama-bench's warm-up). -p, -n and -d take
// comma-separated lists; every pp and tg test runs at every depth.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "cli/bench_grammar.h"
#include "cli/bench_report.h"
#include "cli/bench_throughput.h"
#include "cli/kv_disk_options.h"
#include "cli/commands.h"
#include "cli/memory_bandwidth.h"
#include "cli/model_options.h"
#include "cli/tensor_parallel_ranks.h"
#include "engine/model_runner.h"
#include "engine/step_broadcast.h"

namespace ds {
namespace {

constexpr int64_t k_max_tokens = 1 << 20;
constexpr size_t k_bandwidth_buffer = size_t(1) << 30;  // far beyond any cache
constexpr int64_t k_fill_chunk = 512;                     // llama-bench's micro-batch

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer bench: %s\n", message.c_str());
  return 1;
}

// "512,1024": the counts `option` gives, or its default; each 0..k_max_tokens.
Result<std::vector<int64_t>> token_counts(const Args& a, const std::string& option, const std::string& derived = "") {
  const std::string text = a.get(option, derived);
  std::vector<int64_t> counts;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long long v = item.empty() ? -1 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > k_max_tokens) {
      return Status::error(a.spelled(option) + " takes comma-separated token counts in 0.." + std::to_string(k_max_tokens) + ", not '" +
                           text + "'");
    }
    counts.push_back(v);
    at = comma + 1;
  }
  return counts;
}

// The first of `options` given, which `mode` does not read: refused rather than ignored.
Status refuse_options(const Args& a, const char* mode, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (a.has(o)) return Status::error(a.spelled(o) + " does not apply to " + mode);
  return Status();
}

Result<BenchFormat> output_format(const Args& a) {
  const std::string f = a.get("--output");
  if (f == "text") return BenchFormat::text;
  if (f == "md") return BenchFormat::markdown;
  if (f == "json") return BenchFormat::json;
  return Status::error(a.spelled("--output") + " must be text, md or json, not '" + f + "'");
}

// Bytes a decode step reads at a context of `context` tokens: every matrix
// once (of the embedding only its row; of the routed experts the share a
// token uses on average) and the cache's rows up to its position.
double read_bytes_per_token(const Model& m, const KvCacheOptions& kv, double context) {
  const ModelWeights& w = m.weights();
  const MoeConfig& moe = m.config().moe;
  double bytes = 0;
  for (const NamedMatrix& named : w.named_matrices) {
    const WeightMatrix& matrix = *named.matrix;
    double b = double(matrix.row_stride_bytes()) * double(matrix.n_rows);
    if (matrix.row_scales) b += 4.0 * double(matrix.n_rows);
    if (named.matrix == &w.token_embd) b /= double(matrix.n_rows);
    else if (named.tensor.find("_exps.") != std::string::npos) b *= double(moe.n_expert_used) / double(moe.n_expert);
    bytes += b;
  }
  return bytes + double(KvCache::bytes_per_token(m.config(), kv.dtype)) * context;
}

int64_t parameter_count(const GgufFile& file) {
  int64_t n = 0;
  for (const GgufTensorInfo& t : file.tensors()) n += t.n_elements();
  return n;
}

int64_t tensor_bytes(const GgufFile& file) {
  int64_t n = 0;
  for (const GgufTensorInfo& t : file.tensors()) n += int64_t(t.n_bytes);
  return n;
}

OptionTable bench_option_table() {
  return join_options({
      model_option_table(),
      device_option_table(),
      speculation_option_table(),
      tensor_parallel_option_table(),
      kv_disk_option_table(),
      {
          {{"-p", "--n-prompt"}, "N[,N...]", "512", "ppN: N prompt tokens in one forward"},
          {{"-n", "--n-gen"}, "N[,N...]", "", "tgN: N single-token decode steps (default: 128; with --json-schema, 512 tokens a run)"},
          {{"-d", "--n-depth"}, "N[,N...]", "0", "run each test after a context of N tokens"},
          {{"-r", "--repetitions"}, "N", "", "runs of each test, 1..1000 (default: 3; with --json-schema, 5)"},
          {{"-o", "--output"}, "text|md|json", "text", "the report's form"},
          {{"--membw"}, "", "", "measure the memory's read bandwidth (alone, without -m: only that)"},
          {{"--bandwidth"}, "GB/S", "", "the read bandwidth to report the share of, in place of --membw"},
          {{"--concurrency"}, "C", "", "the batching engine's throughput with C requests at once"},
          {{"--requests"}, "N", "", "with --concurrency: requests in all (default: 4 x C, at least 8)"},
          {{"--prompt-len"}, "N", "128", "with --concurrency: each request's prompt tokens"},
          {{"--gen-len"}, "N", "128", "with --concurrency: each request's generated tokens"},
          {{"--max-num-batched-tokens"}, "N", "512", "with --concurrency: tokens a step computes at most"},
          {{"--prompts"}, "FILE", "", "with --concurrency: the prompts, JSON lines with a \"prompt\" each"},
          {{"--trace"}, "FILE", "", "with --concurrency: write every engine step to FILE (JSON lines)"},
          {{"--json-schema"}, "FILE", "", "constrained decoding's speed under this schema, beside unconstrained"},
      },
  });
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const OptionTable table = bench_option_table();
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer bench -m MODEL.gguf [options]  |  dsinfer bench --membw",
                      "Speed as llama-bench measures it (ppN, tgN at depths), the batching engine's throughput (--concurrency),\n"
                      "constrained decoding's (--json-schema), or the memory's bandwidth (--membw).",
                      table);
  }
  const Args& a = args.value();
  if (a.has("--tensor-parallel")) {
    const Status refused = refuse_options(a, "--tensor-parallel", {"--json-schema", "--membw"});
    if (!refused.ok()) return fail(refused.message());
  }
  auto ranks = join_tensor_parallel_ranks(a, "bench", argc, argv);
  if (!ranks.ok()) return fail(ranks.message());
  // The device first: the threads started from here on inherit its cores.
  auto device = claim_device(a, ranks.value().get());
  if (!device.ok()) return fail(device.message());
  const std::initializer_list<const char*> throughput_options = {"--concurrency", "--requests", "--prompt-len", "--gen-len",
                                                                 "--max-num-batched-tokens", "--prompts", "--trace",
                                                                 "--speculative-ngram", "--speculative-mtp", "--draft-model",
                                                                 "--draft-tokens", "--draft-p-min", "--kv-disk-dir", "--kv-disk-bytes"};
  const std::initializer_list<const char*> sequence_options = {"--n-prompt", "--n-depth", "--output", "--membw", "--bandwidth"};
  if (a.has("--membw") && !a.has("--model")) {
    // The machine alone: what would configure a model or a test is refused, not ignored.
    for (const Status& s : {refuse_options(a, "--membw without a model", throughput_options),
                            refuse_options(a, "--membw without a model", {"--n-prompt", "--n-depth", "--output", "--bandwidth",
                                                                          "--n-gen", "--repetitions", "--json-schema"}),
                            refuse_options(a, "--membw without a model", {"--ctx-size", "--kv-page-tokens", "--kv-cache-dtype",
                                                                          "--kv-cache-memory", "--no-mmap", "--no-repack", "--mla-prefill"})}) {
      if (!s.ok()) return fail(s.message());
    }
    auto threads = a.get_int("--threads", int64_t(usable_cpu_count()));
    if (!threads.ok() || threads.value() < 1 || threads.value() > 1024) return fail("--threads must be between 1 and 1024");
    ThreadPool pool(int(threads.value()));
    std::printf("memory read bandwidth: %.1f GB/s (%d threads, a %zu MiB buffer, best of 5)\n",
                measure_read_bandwidth(pool, k_bandwidth_buffer, 5) / 1e9, pool.n_threads(), k_bandwidth_buffer >> 20);
    return 0;
  }
  auto options = parse_model_options(a, ranks.value().get());
  if (!options.ok()) return fail(options.message());
  if (a.has("--trace") && !a.has("--concurrency")) {
    std::fprintf(stderr, "dsinfer bench: --trace records the batching engine's steps: give --concurrency too\n");
    return 1;
  }
  if (a.has("--concurrency")) {
    for (const Status& s : {refuse_options(a, "--concurrency", sequence_options),
                            refuse_options(a, "--concurrency", {"--n-gen", "--repetitions", "--json-schema"})}) {
      if (!s.ok()) return fail(s.message());
    }
    return run_throughput_bench(a, options.value(), ranks.value().get());
  }
  if (a.has("--json-schema")) {
    for (const Status& s : {refuse_options(a, "--json-schema", sequence_options), refuse_options(a, "--json-schema", throughput_options)}) {
      if (!s.ok()) return fail(s.message());
    }
    return run_grammar_bench(a, options.value());
  }
  // One sequence: the cache holds the longest test, so a context size would be read by nothing.
  for (const Status& s : {refuse_options(a, "one sequence (no --concurrency)", throughput_options),
                          refuse_options(a, "one sequence (no --concurrency), whose cache holds the longest test", {"--ctx-size"})}) {
    if (!s.ok()) return fail(s.message());
  }
  auto prompts = token_counts(a, "--n-prompt");
  auto gens = token_counts(a, "--n-gen", "128");
  auto depths = token_counts(a, "--n-depth");
  auto repetitions = a.get_int("--repetitions", 3);
  auto format = output_format(a);
  auto given_bandwidth = a.get_float("--bandwidth", 0.0);
  for (const Status& s : {prompts.status(), gens.status(), depths.status(), repetitions.status(), format.status(),
                          given_bandwidth.status()}) {
    if (!s.ok()) return fail(s.message());
  }
  if (repetitions.value() < 1 || repetitions.value() > 1000) return fail("-r must be 1..1000");
  if (a.has("--bandwidth") && (!(given_bandwidth.value() > 0) || a.has("--membw")))
    return fail("--bandwidth takes the read bandwidth in GB/s (> 0), in place of measuring it with --membw");

  auto model = load_model(options.value());
  if (!model.ok()) return fail(model.message());
  Model& m = *model.value();
  BenchReport report;
  report.bandwidth = given_bandwidth.value() * 1e9;
  if (a.has("--membw")) report.bandwidth = measure_read_bandwidth(m.backend().host_pool(), k_bandwidth_buffer, 5);
  const int64_t longest = std::max(*std::max_element(prompts.value().begin(), prompts.value().end()),
                                   *std::max_element(gens.value().begin(), gens.value().end())) +
                          *std::max_element(depths.value().begin(), depths.value().end());
  KvCacheOptions kv = options.value().kv;
  kv.n_pages = (longest + 1 + kv.page_tokens - 1) / kv.page_tokens;
  auto cache = KvCache::create(m.backend(), m.config(), kv);
  if (!cache.ok()) return fail(cache.message());
  if (Collective* others = ranks.value().get(); others && others->rank() != 0) {  // rank 0 runs the tests, the others its steps
    const Status followed = follow_steps(m, *cache.value(), *others);
    return followed.ok() ? 0 : fail(followed.message());
  }
  const std::unique_ptr<StepSender> leader = lead_steps(ranks.value().get());  // the others end when it goes
  std::vector<int32_t> pages(size_t(kv.n_pages));
  std::iota(pages.begin(), pages.end(), 0);
  ModelRunner runner(m, *cache.value(), RankSteps{leader.get()});
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

  Status status = forward(1, 0);  // warm-up: page faults, thread start (and the tg tests' shape)
  if (!status.ok()) return fail(status.message());
  const ModelOptions& mo = options.value().model;
  report.model = options.value().path;
  report.arch = m.config().arch_name();
  report.backend = m.backend().name();
  // As weights.cpp places them: the matrices copied unless --no-repack keeps the file's pages.
  const bool copy = mo.load_mode == LoadMode::copy;
  report.placement = std::string(copy ? "copied (--no-mmap)" : mo.interleave ? "copied where multiplied, tables mapped" : "mapped") +
                     (mo.interleave ? ", repacked where the backend has a layout" : " (--no-repack)");
  report.model_bytes = tensor_bytes(m.file());
  report.n_params = parameter_count(m.file());
  report.n_threads = mo.n_threads;
  int64_t filled = 0;  // positions of the cache holding the context (a test writes only past them)
  for (int64_t depth : depths.value()) {
    for (int64_t at = std::min(filled, depth); at < depth && status.ok(); at += k_fill_chunk)
      status = forward(std::min(k_fill_chunk, depth - at), at);
    filled = depth;
    for (int64_t n_prompt : prompts.value()) {
      if (n_prompt == 0) continue;
      BenchTest test{n_prompt, 0, depth, {}, 0};
      if (status.ok()) status = forward(n_prompt, depth);  // warm-up in the test's shape, as llama-bench's: its workspace, its pages
      for (int64_t r = 0; r < repetitions.value() && status.ok(); ++r)
        test.tokens_per_second.push_back(double(n_prompt) / seconds_of([&] { status = forward(n_prompt, depth); }));
      report.tests.push_back(std::move(test));
    }
    for (int64_t n_gen : gens.value()) {
      if (n_gen == 0) continue;
      // Step i attends to depth + i + 1 positions.
      BenchTest test{0, n_gen, depth, {}, read_bytes_per_token(m, kv, double(depth) + double(n_gen + 1) / 2.0)};
      for (int64_t r = 0; r < repetitions.value() && status.ok(); ++r) {
        test.tokens_per_second.push_back(double(n_gen) / seconds_of([&] {
          for (int64_t i = 0; i < n_gen && status.ok(); ++i) status = forward(1, depth + i);
        }));
      }
      report.tests.push_back(std::move(test));
    }
  }
  if (!status.ok()) return fail(status.message());
  print_bench_report(report, format.value());
  if (const Collective* split = ranks.value().get()) {
    // The all-reduces gather every rank's partial output (parallel/collective.h): two a layer.
    const int64_t sent = 2 * m.config().n_embd * int64_t(sizeof(float));
    const int64_t logits_part = m.config().n_vocab / split->size() * int64_t(sizeof(float));
    std::printf("tensor parallel: %d ranks; per token and layer each rank sends %lld bytes and receives %lld (two all-reduces of %lld "
                "floats), %lld and %lld per token over the %lld layers; per row of logits it sends its part of the vocabulary, "
                "%lld bytes, and receives %lld\n",
                split->size(), (long long)sent, (long long)(sent * (split->size() - 1)), (long long)m.config().n_embd,
                (long long)(sent * m.config().n_layer), (long long)(sent * (split->size() - 1) * m.config().n_layer),
                (long long)m.config().n_layer, (long long)logits_part, (long long)(logits_part * (split->size() - 1)));
  }
  return 0;
}

}  // namespace ds
