#include "cli/bench_throughput.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <random>

#include "cli/kv_disk_options.h"
#include "engine/engine_core.h"
#include "engine/step_broadcast.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
};

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

// Random token prompts, as vLLM's throughput benchmark makes with --dataset random.
std::vector<BenchRequest> random_requests(int64_t n, int32_t prompt_len, int32_t gen_len, int64_t n_vocab) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(0, int32_t(n_vocab - 1));
  std::vector<BenchRequest> requests(static_cast<size_t>(n));
  for (BenchRequest& r : requests) {
    r.prompt.resize(static_cast<size_t>(prompt_len));
    for (int32_t& t : r.prompt) t = token(rng);
    r.max_tokens = gen_len;
  }
  return requests;
}

// One JSON object per line: {"prompt": "...", "max_tokens": N}; max_tokens
// defaults to --gen-len. Prompts are tokenized with the model's tokenizer.
Result<std::vector<BenchRequest>> jsonl_requests(const std::string& path, const GgufFile& file, int32_t gen_len) {
  std::ifstream in(path);
  if (!in) return Status::error("cannot read prompts file '" + path + "'");
  auto tokenizer = Tokenizer::from_gguf(file);
  if (!tokenizer.ok()) return Status::error("prompts file needs the model's tokenizer: " + tokenizer.message());
  std::vector<BenchRequest> requests;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = path + ":" + std::to_string(line_number) + ": ";
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Status::error(where + "not a JSON object");
    if (!j.contains("prompt") || !j["prompt"].is_string()) return Status::error(where + "'prompt' must be a string");
    BenchRequest r;
    r.prompt = tokenizer.value()->encode(j["prompt"].get<std::string>(), true, false);
    r.max_tokens = gen_len;
    if (j.contains("max_tokens")) {
      if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<int64_t>() < 1 || j["max_tokens"].get<int64_t>() > 1 << 20) {
        return Status::error(where + "'max_tokens' must be a positive integer");
      }
      r.max_tokens = j["max_tokens"].get<int32_t>();
    }
    if (r.prompt.empty()) return Status::error(where + "the prompt is empty after tokenization");
    requests.push_back(std::move(r));
  }
  if (requests.empty()) return Status::error("prompts file '" + path + "' holds no prompt");
  return requests;
}

// What one pass over the requests measured.
struct ServeFigures {
  double seconds = 0.0;
  std::vector<double> ttft, tpot, e2e;  // ms, one per request
  int64_t output_tokens = 0, steps = 0, step_tokens = 0, peak_pages = 0, busy_steps = 0;
  double fragmentation_sum = 0.0;
  std::vector<int64_t> expert_tokens;  // summed over steps
  // Steps that only decode (every computed token is sampled): the batched
  // decode rate, apart from prefill.
  int64_t decode_steps = 0, decode_tokens = 0;
  double decode_seconds = 0.0;
  std::vector<std::vector<int32_t>> outputs;  // each request's tokens, in submission order
  EngineStats end;
};

// Runs the requests through `core`, at most `concurrency` in flight, greedy,
// after a short warm-up (page faults and thread start-up are not part of the
// figures). As serve does, every step is bracketed for the profiler, which
// records only once started.
Result<ServeFigures> serve_requests(EngineCore& core, const std::vector<BenchRequest>& requests, int64_t concurrency) {
  GenerationParams params;
  params.sampling.temperature = 0.0f;
  params.stop_at_end_of_generation = false;
  {
    GenerationParams warm = params;
    warm.max_tokens = 2;
    auto id = core.add(std::vector<int32_t>(8, 1), warm);
    if (!id.ok()) return Status::error(id.message());
    while (!core.idle()) (void)core.step();
  }
  ServeFigures f;
  f.outputs.resize(requests.size());
  std::map<int64_t, size_t> request_of;  // engine id -> request index
  size_t submitted = 0, finished = 0;
  const Clock::time_point start = Clock::now();
  while (finished < requests.size()) {
    while (submitted < requests.size() && int64_t(submitted - finished) < concurrency) {
      params.max_tokens = requests[submitted].max_tokens;
      auto id = core.add(requests[submitted].prompt, params);
      if (!id.ok()) return Status::error("request " + std::to_string(submitted) + " was rejected: " + id.message());
      request_of[id.value()] = submitted++;
    }
    core.trace().begin_step();
    auto outputs = core.step();
    if (!outputs.ok()) return Status::error(outputs.message());
    ++f.steps;
    const EngineStats stats = core.stats();
    core.trace().end_step(stats.last_step_tokens, stats.n_running);
    f.step_tokens += stats.last_step_tokens;
    if (stats.last_step_tokens > 0 && stats.last_step_tokens == int64_t(outputs.value().size())) {
      ++f.decode_steps;
      f.decode_tokens += stats.last_step_tokens;
      f.decode_seconds += stats.last_step_seconds;
    }
    f.peak_pages = std::max<int64_t>(f.peak_pages, stats.pages_held);
    if (f.expert_tokens.size() < stats.expert_tokens.size()) f.expert_tokens.resize(stats.expert_tokens.size());
    for (size_t e = 0; e < stats.expert_tokens.size(); ++e) f.expert_tokens[e] += stats.expert_tokens[e];
    if (stats.n_running > 0) {
      f.fragmentation_sum += stats.fragmentation;
      ++f.busy_steps;
    }
    for (const StepOutput& o : outputs.value()) {
      ++f.output_tokens;
      f.outputs[request_of.at(o.id)].push_back(o.token);
      if (!o.metrics) continue;
      ++finished;
      f.ttft.push_back(o.metrics->ttft_seconds * 1000.0);
      if (o.metrics->n_output_tokens > 1) f.tpot.push_back(o.metrics->tpot_seconds * 1000.0);
      f.e2e.push_back(o.metrics->e2e_seconds * 1000.0);
    }
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  f.end = core.stats();
  return f;
}

double decode_rate(const ServeFigures& f) { return f.decode_seconds > 0 ? double(f.decode_tokens) / f.decode_seconds : 0.0; }

}  // namespace

int run_throughput_bench(const Args& a, CommonModelOptions options, Collective* ranks) {
  auto concurrency = a.get_int("--concurrency");
  auto prompt_len = a.get_int("--prompt-len");
  auto gen_len = a.get_int("--gen-len");
  auto budget = a.get_int("--max-num-batched-tokens");
  for (const auto* v : {&concurrency, &prompt_len, &gen_len, &budget}) {
    if (!v->ok()) return fail(v->message());
    if (v->value() < 1 || v->value() > 1 << 20) {
      return fail("--concurrency, --prompt-len, --gen-len and --max-num-batched-tokens must be positive integers");
    }
  }
  auto n_requests = a.get_int("--requests", std::max<int64_t>(4 * concurrency.value(), 8));
  if (!n_requests.ok() || n_requests.value() < 1) return fail("--requests must be a positive integer");
  auto model = load_model(options);
  if (!model.ok()) return fail(model.message());
  Model& m = *model.value();
  if (ranks && ranks->rank() != 0) {  // rank 0 runs the requests, the others its steps over pages as its own
    auto memory = KvCache::create(m.backend(), m.config(), share_cache_options(*ranks, options.kv));
    if (!memory.ok()) return fail(memory.message());
    const Status followed = follow_steps(m, *memory.value(), *ranks);
    return followed.ok() ? 0 : fail(followed.message());
  }
  const std::unique_ptr<StepSender> leader = lead_steps(ranks);  // the others end when it goes

  std::vector<BenchRequest> requests;
  if (a.has("--prompts")) {
    auto loaded = jsonl_requests(a.get("--prompts"), m.file(), int32_t(gen_len.value()));
    if (!loaded.ok()) return fail(loaded.message());
    requests = loaded.take();
  } else {
    requests = random_requests(n_requests.value(), int32_t(prompt_len.value()), int32_t(gen_len.value()), m.config().n_vocab);
  }
  int64_t longest = 0;
  for (const BenchRequest& r : requests) longest = std::max<int64_t>(longest, int64_t(r.prompt.size()) + r.max_tokens);

  const int64_t pages_per_request = (longest + options.kv.page_tokens - 1) / options.kv.page_tokens;
  auto kv = size_kv_pool(options, m.config(), pages_per_request * concurrency.value() + 1, concurrency.value(), budget.value());
  if (!kv.ok()) return fail(kv.message());
  auto memory = KvCache::create(m.backend(), m.config(), ranks ? share_cache_options(*ranks, kv.value()) : kv.value());
  if (!memory.ok()) return fail(memory.message());
  EngineCoreConfig config;
  config.ranks.sender = leader.get();
  config.scheduler = SchedulerConfig{int32_t(budget.value()), int32_t(concurrency.value()), int32_t(longest)};
  auto speculation = parse_speculation(a);
  if (!speculation.ok()) return fail(speculation.message());
  config.speculation = speculation.value();
  std::unique_ptr<DraftModel> draft_model;
  if (!config.speculation.draft_model.empty()) {
    auto tokenizer = Tokenizer::from_gguf(m.file());
    if (!tokenizer.ok()) return fail(tokenizer.message());
    auto loaded = load_draft_model(config.speculation, options, m, tokenizer.value()->vocab(), kv.value().n_pages * kv.value().page_tokens);
    if (!loaded.ok()) return fail(loaded.message());
    draft_model = loaded.take();
  }
  config.draft_model = draft_model.get();
  auto mtp = load_mtp_drafter(config.speculation, options, m, *memory.value());
  if (!mtp.ok()) return fail(mtp.message());
  config.mtp_drafter = mtp.value().get();
  const bool speculative = config.speculation.n_draft > 0;
  auto kv_disk = parse_kv_disk_options(a, m.config(), kv.value(), config.prefix_cache);
  if (!kv_disk.ok()) return fail(kv_disk.message());
  std::unique_ptr<KvDiskTier> tier;
  if (kv_disk.value()) {
    auto opened = open_kv_disk_tier(*kv_disk.value(), options, m.config(), *memory.value(), m.backend().name());
    if (!opened.ok()) return fail(opened.message());
    tier = opened.take();
    tier->set_reads(false);  // the run below computes every prompt (and writes its pages); the tier's pass reads them
    config.kv_disk = tier.get();
  }

  // With speculation, the same requests decoded plainly first, over the same
  // KV memory (a fresh engine: nothing in its prefix cache), for the speedup.
  std::optional<ServeFigures> plain;
  if (speculative) {
    EngineCoreConfig plain_config = config;
    plain_config.speculation = SpeculationConfig{};
    plain_config.draft_model = nullptr;
    plain_config.mtp_drafter = nullptr;
    EngineCore plain_core(m, *memory.value(), plain_config, nullptr);
    auto figures = serve_requests(plain_core, requests, concurrency.value());
    if (!figures.ok()) return fail(figures.message());
    plain = figures.take();
  }
  EngineCore core(m, *memory.value(), config, nullptr);
  if (a.has("--trace")) {
    if (Status s = core.trace().start(a.get("--trace"), -1); !s.ok()) return fail("--trace: " + s.message());
  }
  auto served = serve_requests(core, requests, concurrency.value());
  if (!served.ok()) return fail(served.message());
  const ServeFigures& f = served.value();
  const EngineStats& stats = f.end;

  std::printf("concurrency %lld, %zu requests, backend %s, %s KV%s\n", (long long)concurrency.value(), requests.size(),
              m.backend().name().c_str(), dtype_name(kv.value().dtype),
              ranks ? (", " + std::to_string(ranks->size()) + " tensor-parallel ranks").c_str() : "");
  std::printf("request throughput: %.3f req/s\n", double(requests.size()) / f.seconds);
  std::printf("output tokens/s: %.2f\n", double(f.output_tokens) / f.seconds);
  std::printf("TTFT ms: p50 %.1f p90 %.1f p99 %.1f\n", percentile(f.ttft, 50), percentile(f.ttft, 90), percentile(f.ttft, 99));
  std::printf("TPOT ms: p50 %.1f p90 %.1f p99 %.1f\n", percentile(f.tpot, 50), percentile(f.tpot, 90), percentile(f.tpot, 99));
  std::printf("latency ms: p50 %.1f p90 %.1f p99 %.1f\n", percentile(f.e2e, 50), percentile(f.e2e, 90), percentile(f.e2e, 99));
  std::printf("steps: %lld, computed tokens per step %.2f; decode-only steps: %lld at %.2f tokens/s\n", (long long)f.steps,
              double(f.step_tokens) / double(f.steps), (long long)f.decode_steps, decode_rate(f));
  std::printf("KV pool: %d pages of %lld tokens, %.1f KiB each; peak %lld held (%.1f MiB); mean fragmentation %.3f; "
              "%d held at the end; %lld preemptions\n",
              stats.pages_total, (long long)kv.value().page_tokens, double(stats.page_bytes) / 1024.0, (long long)f.peak_pages,
              double(f.peak_pages * stats.page_bytes) / 1048576.0, f.busy_steps ? f.fragmentation_sum / double(f.busy_steps) : 0.0,
              stats.pages_held, (long long)stats.n_preemptions);
  std::printf("prefix cache: %lld of %lld prompt tokens hit\n", (long long)stats.prefix_hit_tokens,
              (long long)stats.prefix_query_tokens);
  if (speculative) {
    // A drafted sequence-step emits its accepted tokens and one of the target's own.
    std::printf("speculative decoding (%s, up to %d drafts): %lld draft tokens verified in %lld drafts, %lld accepted (%.1f%%), "
                "%.2f tokens per drafted step\n",
                drafter_name(config), config.speculation.n_draft, (long long)stats.draft_tokens,
                (long long)stats.drafts, (long long)stats.accepted_draft_tokens,
                stats.draft_tokens ? 100.0 * double(stats.accepted_draft_tokens) / double(stats.draft_tokens) : 0.0,
                stats.drafts ? 1.0 + double(stats.accepted_draft_tokens) / double(stats.drafts) : 1.0);
    size_t differing = 0;
    for (size_t i = 0; i < requests.size(); ++i) differing += f.outputs[i] != plain->outputs[i];
    std::printf("plain decoding of the same requests: output tokens/s %.2f, decode-only steps at %.2f tokens/s; "
                "speedup %.2fx (output tokens/s); greedy outputs identical: %s\n",
                double(plain->output_tokens) / plain->seconds, decode_rate(*plain),
                (double(f.output_tokens) / f.seconds) / (double(plain->output_tokens) / plain->seconds),
                differing == 0 ? "yes" : ("no, " + std::to_string(differing) + " of " + std::to_string(requests.size()) +
                                          " differ").c_str());
    if (differing) return fail("speculative decoding changed greedy outputs: a bug");
  }
  if (tier) {
    // The same requests again on a fresh engine (an empty pool, as after a
    // restart) whose prompts' pages come back from the disk tier.
    tier->flush();
    tier->set_reads(true);
    EngineCore warm_core(m, *memory.value(), config, nullptr);
    auto warm = serve_requests(warm_core, requests, concurrency.value());
    if (!warm.ok()) return fail(warm.message());
    size_t differing = 0;
    for (size_t i = 0; i < requests.size(); ++i) differing += warm.value().outputs[i] != f.outputs[i];
    const KvDiskTierStats d = tier->stats();
    std::printf("kv disk tier: TTFT p50 %.1f ms computed, %.1f ms read back (%.1fx); %lld of %lld prompt tokens from it; %lld pages "
                "read (%.1f MiB), %lld written, %lld dropped, %lld corrupt; greedy outputs identical: %s\n",
                percentile(f.ttft, 50), percentile(warm.value().ttft, 50), percentile(f.ttft, 50) / percentile(warm.value().ttft, 50),
                (long long)warm.value().end.prefix_hit_tokens, (long long)warm.value().end.prefix_query_tokens, (long long)d.hits,
                double(d.bytes_read) / 1048576.0, (long long)d.pages_written, (long long)d.pages_dropped, (long long)d.corrupt,
                differing == 0 ? "yes" : "no");
    if (differing) return fail("pages read back from the disk tier changed greedy outputs: a bug");
  }
  if (!f.expert_tokens.empty()) {
    const auto [least, most] = std::minmax_element(f.expert_tokens.begin(), f.expert_tokens.end());
    int64_t total = 0;
    for (int64_t n : f.expert_tokens) total += n;
    std::printf("expert load over the run: %lld token-expert assignments, per expert min %lld, mean %.1f, max %lld\n",
                (long long)total, (long long)*least, double(total) / double(f.expert_tokens.size()), (long long)*most);
  }
  return 0;
}

}  // namespace ds
