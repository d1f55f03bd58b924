#include "cli/model_version_loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>

#include "base/log.h"
#include "base/memory_size.h"
#include "cli/model_options.h"
#include "cli/kv_disk_options.h"
#include "engine/step_broadcast.h"
#include "gguf/gguf_file.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

// The names a request's fields take: each option of a version's but --model, in snake case.
std::string version_field_names() {
  std::string names;
  for (const Option& option : version_option_table()) {
    const std::string& name = option.names.back();
    if (name == "--model") continue;
    std::string field = name.substr(2);
    for (char& c : field) c = c == '-' ? '_' : c;
    names += (names.empty() ? "" : ", ") + field;
  }
  return names;
}

Result<Args> args_for(const Args& serve_args, const ModelLoadRequest& request) {
  Args args = serve_args;
  const OptionTable table = version_option_table();
  for (const auto& [key, value] : request.options) {
    std::string flag = "--" + key;
    for (char& c : flag) c = c == '_' ? '-' : c;
    const auto option = std::find_if(table.begin(), table.end(), [&](const Option& o) { return o.names.back() == flag; });
    if (flag == "--model" || key.find('-') != std::string::npos || option == table.end()) {
      return Status::error("'" + key + "' is not an option a model version takes (" + version_field_names() + ")");
    }
    if (!option->value.empty()) {
      args.set(flag, value);
    } else if (value == "true") {
      args.set_flag(flag);
    } else if (value == "false") {
      args.erase(flag);
    } else {
      return Status::error("'" + key + "' must be true or false");
    }
  }
  args.set("--model", request.path);
  return args;
}

// Everything a version is made from, settled before anything is allocated.
struct Settings {
  CommonModelOptions options;
  EngineCoreConfig engine;
  int64_t n_ctx = 0;
  std::string chat_template_choice, tool_call_format = "auto";
  int64_t file_bytes = 0, kv_pool_bytes = 0;
  std::optional<KvDiskSettings> kv_disk;  // --kv-disk-dir's
};

Result<Settings> settle(const Args& args, Collective* ranks) {
  Settings s;
  auto options = parse_model_options(args, ranks);
  if (!options.ok()) return options.status();
  s.options = options.take();
  auto max_seqs = args.get_int("--max-num-seqs");
  auto batched = args.get_int("--max-num-batched-tokens");
  if (!max_seqs.ok()) return max_seqs.status();
  if (!batched.ok()) return batched.status();
  if (max_seqs.value() < 1 || max_seqs.value() > 4096) return Status::error("--max-num-seqs must be 1..4096");
  if (batched.value() < 1 || batched.value() > 1 << 20) return Status::error("--max-num-batched-tokens must be 1..1048576");
  s.chat_template_choice = args.get("--chat-template");
  s.tool_call_format = args.get("--tool-call-format");
  if (s.tool_call_format != "auto") {
    auto format = tool_call_format_from_name(s.tool_call_format);
    if (!format.ok()) return Status::error("--tool-call-format: " + format.message());
  }
  // The header alone: a bad file fails here, before any memory is taken.
  auto file = GgufFile::open(s.options.path);
  if (!file.ok()) return file.status();
  auto config = ModelConfig::from_gguf(*file.value());
  if (!config.ok()) return config.status();
  if (s.options.model.nextn_rows) DS_RETURN_IF_ERROR(config.value().cache_nextn_rows());
  if (ranks) DS_RETURN_IF_ERROR(config.value().split_across(rank_layout(s.options.model)));  // this rank's KV rows
  s.file_bytes = int64_t(file.value()->file_bytes());
  settle_page_tokens(s.options, config.value());
  s.n_ctx = s.options.n_ctx > 0 ? s.options.n_ctx : std::min<int64_t>(config.value().n_ctx_train, 4096);
  KvCacheOptions& kv = s.options.kv;
  const int64_t context_pages = (s.n_ctx + kv.page_tokens - 1) / kv.page_tokens;
  // Default pool: every sequence slot can hold a full context, within a quarter of free memory.
  int64_t wanted_pages = context_pages * max_seqs.value();
  const int64_t page_bytes = KvCache::page_bytes(config.value(), kv.dtype, kv.page_tokens);
  if (s.options.kv_memory_bytes == 0) {
    const int64_t quarter_free = available_memory_bytes() / 4 / page_bytes;
    if (quarter_free > 0) wanted_pages = std::min(wanted_pages, std::max(quarter_free, context_pages));
  }
  auto sized = size_kv_pool(s.options, config.value(), wanted_pages, max_seqs.value(), batched.value());
  if (!sized.ok()) return sized.status();
  kv = sized.value();
  if (kv.n_pages < context_pages) {
    DS_LOG_WARN("the KV pool holds %lld tokens, less than the context of %lld: the context is cut to fit",
                (long long)(kv.n_pages * kv.page_tokens), (long long)s.n_ctx);
    s.n_ctx = kv.n_pages * kv.page_tokens;
  }
  s.kv_pool_bytes = kv.n_pages * page_bytes + kv.n_window_pages * KvCache::window_page_bytes(config.value(), kv);
  // A new prompt leaves 5% of the pool free for the running requests to grow into.
  s.engine.scheduler = SchedulerConfig{int32_t(batched.value()), int32_t(max_seqs.value()), int32_t(s.n_ctx), 0.05};
  s.engine.prefix_cache = !args.has("--no-prefix-cache");
  auto kv_disk = parse_kv_disk_options(args, config.value(), kv, s.engine.prefix_cache);
  if (!kv_disk.ok()) return kv_disk.status();
  s.kv_disk = kv_disk.value();
  auto speculation = parse_speculation(args);
  if (!speculation.ok()) return speculation.status();
  s.engine.speculation = speculation.value();
  return s;
}

std::string token_text(const Vocab& vocab, int32_t id) { return id == k_no_token ? "" : vocab.tokens[size_t(id)]; }

// Runs one request to its end; its text, or why it failed. Every
// log-probability it reports (prompt and output) must be finite.
Result<std::string> run_to_end(Engine& engine, EngineRequest request) {
  auto stream = engine.submit(std::move(request));
  std::string text;
  for (;;) {
    auto event = stream->next(std::chrono::seconds(600));
    if (!event) return Status::error("did not finish within 600 s");
    for (const auto* list : {&event->logprobs, &event->prompt_logprobs}) {
      for (const TokenLogprobs& lp : *list) {
        if (!std::isfinite(lp.logprob)) return Status::error("the model's log-probabilities are not finite (NaN or infinite logits)");
      }
    }
    text += event->text;
    if (event->finish == FinishReason::error) return Status::error(event->error);
    if (event->finish != FinishReason::none) return text;
  }
}

// Whether reading a page back from the tier beats computing it: a page's
// read time from a probe file (the page cache dropped first) against a
// prompt's prefill time per page on this version, both measured here. The
// probe prompt's pages are under a salt of their own: never a hit.
Status decide_kv_disk_reads(ModelVersion& v) {
  KvDiskTier& tier = *v.kv_disk;
  auto read = tier.probe_read_seconds_per_page();
  const int32_t page_tokens = tier.options().page_tokens;
  EngineRequest probe;
  std::mt19937 random(std::random_device{}());
  for (int32_t i = 0; i < 4 * page_tokens + 1; ++i) probe.prompt.push_back(int32_t(random() % uint32_t(v.tokenizer->vocab().n_tokens())));
  probe.params.max_tokens = 1;
  probe.params.stop_at_end_of_generation = false;
  probe.params.tenant_salt = random();
  const Clock::time_point started = Clock::now();
  auto ran = run_to_end(*v.engine, std::move(probe));
  if (!ran.ok()) return Status::error("the prefill probe failed: " + ran.message());
  const double compute = std::chrono::duration<double>(Clock::now() - started).count() / 4;
  if (!read.ok()) {
    DS_LOG_WARN("kv disk tier: no read probe (%s): pages are read back", read.message().c_str());
    return Status();
  }
  const bool reads = read.value() < compute;
  tier.set_reads(reads);
  DS_LOG_INFO("kv disk tier: a page (%lld tokens, %lld bytes) reads in %.3f ms and computes in %.2f ms: %s", (long long)page_tokens,
              (long long)tier.options().page_bytes, read.value() * 1e3, compute * 1e3,
              reads ? "hits are read back" : "hits are recomputed (reading is slower); pages are still written");
  return Status();
}

// One forward of a two-token prompt through every layer (page faults taken,
// threads started, the first token sampled) before the version is offered
// to anyone — no more: it is on the path of every start and swap; then the
// operator's check, when given.
Status warm_up_and_check(ModelVersion& v, const ModelLoadRequest& request, std::vector<std::pair<std::string, double>>& phases) {
  Clock::time_point t = Clock::now();
  const auto phase = [&](const char* name) {
    phases.emplace_back(name, std::chrono::duration<double>(Clock::now() - t).count());
    t = Clock::now();
  };
  const Vocab& vocab = v.tokenizer->vocab();
  EngineRequest warm;
  warm.prompt.assign(2, vocab.bos != k_no_token ? vocab.bos : 0);
  warm.params.sampling.temperature = 0.0f;
  warm.params.max_tokens = 1;
  warm.params.stop_at_end_of_generation = false;
  warm.params.logprobs = 0;
  warm.params.prompt_logprobs = 0;
  auto warmed = run_to_end(*v.engine, std::move(warm));
  if (!warmed.ok()) return Status::error("warm-up failed: " + warmed.message());
  phase("warm_up");
  if (request.check_prompt.empty()) return Status();
  EngineRequest check;
  check.prompt = v.tokenizer->encode(request.check_prompt, true, true);
  check.params.sampling.temperature = 0.0f;
  check.params.logprobs = 0;
  const int64_t expected_tokens = int64_t(v.tokenizer->encode(request.expected_output, false, true).size());
  check.params.max_tokens = int32_t(std::min<int64_t>(expected_tokens + 16, INT32_MAX));
  // Room for the expected reply, or else whatever the context leaves.
  if (!v.engine->admit(check.prompt, check.params).fits()) check.params.max_tokens = GenerationParams::k_to_context_end;
  if (const Admit admit = v.engine->admit(check.prompt, check.params); !admit.fits()) return Status::error("check.prompt: " + admit.reason);
  auto reply = run_to_end(*v.engine, std::move(check));
  if (!reply.ok()) return Status::error("check failed: " + reply.message());
  if (reply.value().compare(0, request.expected_output.size(), request.expected_output) != 0) {
    return Status::error("check failed: the greedy reply to check.prompt is '" + reply.value().substr(0, 200) +
                         "', which does not start with check.expected_output '" + request.expected_output.substr(0, 200) + "'");
  }
  phase("check");
  return Status();
}

// What the other ranks make a version from: its file, label and fields.
std::vector<std::string> request_words(const ModelLoadRequest& request) {
  std::vector<std::string> words = {request.path, request.label};
  for (const auto& [key, value] : request.options) {
    words.push_back(key);
    words.push_back(value);
  }
  return words;
}

ModelLoadRequest request_of(const std::vector<std::string>& words) {
  ModelLoadRequest request;
  DS_CHECK(words.size() >= 2 && words.size() % 2 == 0, "a version's words from rank 0 are not a file, a label and pairs");
  request.path = words[0];
  request.label = words[1];
  for (size_t i = 2; i < words.size(); i += 2) request.options.emplace_back(words[i], words[i + 1]);
  return request;
}

// on_ranks: the version on the other ranks (tensor parallel), or null.
Result<std::shared_ptr<ModelVersion>> load(const Settings& s, const ModelLoadRequest& request, std::unique_ptr<RankVersion> on_ranks) {
  const Clock::time_point started = Clock::now();
  Clock::time_point t = started;
  auto v = std::make_shared<ModelVersion>();
  const auto phase = [&](const char* name) {
    v->load_phases.emplace_back(name, std::chrono::duration<double>(Clock::now() - t).count());
    t = Clock::now();
  };
  v->label = request.label;
  v->path = s.options.path;
  auto model = Model::load(s.options.path, s.options.model);
  if (!model.ok()) return model.status();
  v->model = model.take();
  phase("weights");
  auto tokenizer = Tokenizer::from_gguf(v->model->file());
  if (!tokenizer.ok()) return tokenizer.status();
  v->tokenizer = tokenizer.take();
  auto chat_template = ChatTemplate::choose(&v->model->file(), s.chat_template_choice);
  if (!chat_template.ok()) return chat_template.status();
  v->chat_template = std::move(chat_template.value());
  if (!v->chat_template) DS_LOG_WARN("the model has no tokenizer.chat_template: /v1/chat/completions is off (give --chat-template FILE|NAME)");
  v->tool_call_format = v->chat_template ? v->chat_template->tool_call_format() : ToolCallFormat::none;
  if (s.tool_call_format != "auto") v->tool_call_format = tool_call_format_from_name(s.tool_call_format).value();
  const Vocab& vocab = v->tokenizer->vocab();
  v->special_tokens = {token_text(vocab, vocab.bos), token_text(vocab, vocab.eos)};
  phase("tokenizer");
  // Under tensor parallel the other ranks make their pages as these (follow_served_versions).
  auto memory = KvCache::create(v->model->backend(), v->model->config(), on_ranks ? on_ranks->cache_options(s.options.kv) : s.options.kv);
  if (!memory.ok()) return memory.status();
  if (on_ranks) {
    if (Status everywhere = on_ranks->loaded(); !everywhere.ok()) return everywhere;
  }
  v->memory = memory.take();
  v->weight_file_bytes = s.file_bytes;
  v->kv_pool_bytes = s.kv_pool_bytes;
  EngineCoreConfig engine = s.engine;
  if (on_ranks) engine.ranks = on_ranks->steps();
  v->on_ranks = std::move(on_ranks);  // released there when it goes here, after its engine
  if (s.kv_disk) {
    auto tier = open_kv_disk_tier(*s.kv_disk, s.options, v->model->config(), *v->memory, v->model->backend().name());
    if (!tier.ok()) return tier.status();
    v->kv_disk = tier.take();
    engine.kv_disk = v->kv_disk.get();
  }
  if (!engine.speculation.draft_model.empty()) {
    // As many positions as the target's pool: every sequence it holds can draft.
    auto draft = load_draft_model(engine.speculation, s.options, *v->model, vocab, s.options.kv.n_pages * s.options.kv.page_tokens);
    if (!draft.ok()) return draft.status();
    v->draft_model = draft.take();
    engine.draft_model = v->draft_model.get();
  }
  auto mtp = load_mtp_drafter(engine.speculation, s.options, *v->model, *v->memory);
  if (!mtp.ok()) return mtp.status();
  v->mtp_drafter = mtp.take();
  engine.mtp_drafter = v->mtp_drafter.get();
  v->engine = std::make_unique<Engine>(*v->model, *v->memory, engine, *v->tokenizer);
  phase("kv_pool_and_engine");
  if (Status checked = warm_up_and_check(*v, request, v->load_phases); !checked.ok()) return checked;
  if (v->kv_disk) DS_RETURN_IF_ERROR(decide_kv_disk_reads(*v));
  v->load_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  v->loaded_at = std::chrono::system_clock::now();
  std::string phases;
  for (const auto& [name, seconds] : v->load_phases) phases += " " + name + " " + std::to_string(int(seconds * 1000 + 0.5)) + " ms,";
  phases.pop_back();
  DS_LOG_INFO("version '%s' loaded in %.2f s:%s (weights file %s, KV pool %s, resident now %s)", v->label.c_str(), v->load_seconds,
              phases.c_str(), format_memory_size(s.file_bytes).c_str(), format_memory_size(s.kv_pool_bytes).c_str(),
              format_memory_size(resident_memory_bytes()).c_str());
  return v;
}

}  // namespace

OptionTable version_option_table() {
  return join_options({model_option_table(), speculation_option_table(),
                       {
                           {{"--chat-template"}, "FILE|NAME", "", "the chat template: a Jinja file or a built-in's name (default: the model file's)"},
                           {{"--tool-call-format"}, "NAME", "auto", "how the model writes tool calls; auto: what its template shows"},
                           {{"--max-num-seqs"}, "N", "16", "sequences the engine runs at once, 1..4096"},
                           {{"--max-num-batched-tokens"}, "N", "512", "tokens a step computes at most, 1..1048576"},
                           {{"--no-prefix-cache"}, "", "", "do not reuse the KV pages of a shared prompt prefix"},
                       },
                       kv_disk_option_table()});
}

ModelLoader model_version_loader(const Args& serve_args, StepSender* ranks) {
  ModelLoader loader;
  loader.validate = [serve_args, ranks](const ModelLoadRequest& request) {
    auto args = args_for(serve_args, request);
    if (!args.ok()) return args.status();
    return parse_model_options(args.value(), ranks ? &ranks->ranks() : nullptr).status();
  };
  // Versions are numbered for the other ranks in the order they are planned.
  auto next_version = std::make_shared<std::atomic<int32_t>>(0);
  loader.plan = [serve_args, ranks, next_version](const ModelLoadRequest& request) -> Result<ModelLoader::Plan> {
    auto args = args_for(serve_args, request);
    if (!args.ok()) return args.status();
    auto settings = settle(args.value(), ranks ? &ranks->ranks() : nullptr);
    if (!settings.ok()) return settings.status();
    ModelLoader::Plan plan;
    plan.weights_bytes = settings.value().file_bytes;
    plan.kv_pool_bytes = settings.value().kv_pool_bytes;
    const int32_t version = (*next_version)++;
    plan.load = [s = settings.take(), request, ranks, version] {
      auto on_ranks = ranks ? std::make_unique<RankVersion>(*ranks, version, request_words(request), version == 0) : nullptr;
      return load(s, request, std::move(on_ranks));
    };
    return plan;
  };
  return loader;
}

Status follow_served_versions(const Args& serve_args, Collective& ranks) {
  return follow_versions(ranks, [&serve_args, &ranks](const std::vector<std::string>& words,
                                                      const std::function<std::optional<KvCacheOptions>()>& pages) -> Result<FollowedVersion> {
    const ModelLoadRequest request = request_of(words);
    auto args = args_for(serve_args, request);
    if (!args.ok()) return args.status();
    auto settings = settle(args.value(), &ranks);
    if (!settings.ok()) return settings.status();
    FollowedVersion made;
    auto model = Model::load(settings.value().options.path, settings.value().options.model);
    if (!model.ok()) return model.status();
    made.model = model.take();
    const std::optional<KvCacheOptions> options = pages();
    if (!options) return Status::error("version '" + request.label + "' given up by rank 0");
    auto memory = KvCache::create(made.model->backend(), made.model->config(), *options);
    if (!memory.ok()) return memory.status();
    made.cache = memory.take();
    DS_LOG_INFO("rank %d: version '%s' loaded", ranks.rank(), request.label.c_str());
    return made;
  });
}

}  // namespace ds
