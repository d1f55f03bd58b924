#include "cli/bench_grammar.h"

#include <chrono>
#include <cstdio>

#include "base/file_text.h"
#include "engine/engine_core.h"
#include "grammar/json_schema.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer bench: %s\n", message.c_str());
  return 1;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Run {
  int64_t tokens = 0;
  double seconds = 0.0, mask_seconds = 0.0;
};

// One request to the end; the engine's own accounting of the mask time.
Result<Run> generate(Model& m, KvCache& memory, const GenerationParams& params, int32_t max_len) {
  EngineCoreConfig config;
  config.scheduler = SchedulerConfig{512, 1, max_len};
  EngineCore core(m, memory, config, nullptr);
  const Clock::time_point start = Clock::now();
  auto id = core.add(std::vector<int32_t>(8, 1), params);
  if (!id.ok()) return id.status();
  Run run;
  while (!core.idle()) {
    auto outputs = core.step();
    if (!outputs.ok()) return outputs.status();
    run.tokens += int64_t(outputs.value().size());
  }
  run.seconds = seconds_since(start);
  run.mask_seconds = core.stats().grammar_mask_seconds;
  return run;
}

}  // namespace

int run_grammar_bench(const Args& a, CommonModelOptions options) {
  auto repetitions = a.get_int("--repetitions", 5);
  auto n_gen = a.get_int("--n-gen", 512);
  if (!repetitions.ok() || !n_gen.ok() || repetitions.value() < 1 || repetitions.value() > 1000 || n_gen.value() < 1 ||
      n_gen.value() > 1 << 16) {
    return fail("-r must be 1..1000 and -n 1..65536");
  }
  const std::optional<std::string> text = read_file_text(a.get("--json-schema"));
  if (!text) return fail("cannot read " + a.get("--json-schema"));
  auto schema = jinja::Value::parse_json(*text);
  if (!schema.ok()) return fail("--json-schema: " + schema.message());
  auto gbnf = grammar::json_schema_to_gbnf(schema.value());
  if (!gbnf.ok()) return fail(gbnf.message());
  auto compiled = grammar::Grammar::from_gbnf(gbnf.value());
  if (!compiled.ok()) return fail(compiled.message());

  auto model = load_model(options);
  if (!model.ok()) return fail(model.message());
  Model& m = *model.value();
  auto tokenizer = Tokenizer::from_gguf(m.file());
  if (!tokenizer.ok()) return fail(tokenizer.message());
  const Tokenizer& tok = *tokenizer.value();

  const Clock::time_point trie_start = Clock::now();
  auto trie = std::make_shared<const grammar::VocabTrie>(grammar::VocabTrie::of(tok));
  const double trie_seconds = seconds_since(trie_start);
  const grammar::TokenMatcher prototype(std::make_shared<const grammar::Grammar>(compiled.take()), trie, tok.vocab().end_of_generation);

  const int32_t max_len = int32_t(n_gen.value()) + 16;
  KvCacheOptions kv = options.kv;
  kv.n_pages = (max_len + kv.page_tokens - 1) / kv.page_tokens + 1;
  auto memory = KvCache::create(m.backend(), m.config(), kv);
  if (!memory.ok()) return fail(memory.message());

  Run first, constrained, free;
  for (int64_t r = 0; r < repetitions.value(); ++r) {
    GenerationParams params;
    params.sampling.temperature = 1.0f;
    params.sampling.seed = uint64_t(r);
    params.max_tokens = int32_t(n_gen.value());
    params.grammar = prototype;  // copies share the cache of masks, as requests with one grammar do in the server
    auto run = generate(m, *memory.value(), params, max_len);
    if (!run.ok()) return fail(run.message());
    if (r == 0) first = run.value();
    constrained.tokens += run.value().tokens;
    constrained.seconds += run.value().seconds;
    constrained.mask_seconds += run.value().mask_seconds;
    GenerationParams plain;
    plain.sampling.temperature = 1.0f;
    plain.max_tokens = int32_t(run.value().tokens);
    plain.stop_at_end_of_generation = false;
    auto unconstrained = generate(m, *memory.value(), plain, max_len);
    if (!unconstrained.ok()) return fail(unconstrained.message());
    free.tokens += unconstrained.value().tokens;
    free.seconds += unconstrained.value().seconds;
  }
  const double step_ms = 1e3 * free.seconds / double(free.tokens);
  const double first_ms = 1e3 * first.mask_seconds / double(first.tokens);
  const double all_ms = 1e3 * constrained.mask_seconds / double(constrained.tokens);
  std::printf("| n_vocab | trie nodes | trie build ms | tokens | decode step ms | mask ms/token, first run | mask ms/token, all runs | "
              "mask / step |\n|---|---|---|---|---|---|---|---|\n");
  std::printf("| %d | %zu | %.1f | %lld | %.3f | %.3f | %.3f | %.1f%% |\n", tok.vocab().n_tokens(), trie->nodes().size(),
              1e3 * trie_seconds, (long long)constrained.tokens, step_ms, first_ms, all_ms, 100.0 * all_ms / step_ms);
  return 0;
}

}  // namespace ds
