// dsinfer run: stream a completion of a prompt to stdout, then print prompt
// and generation speed (tokens/s) to stderr as llama.cpp does, and the most
// KV memory the sequence held (between steps) beside `dsinfer info`'s arithmetic for its length.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "base/file_text.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/tensor_parallel_ranks.h"
#include "engine/engine_core.h"
#include "engine/step_broadcast.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer run: %s\n", message.c_str());
  return 1;
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", double(bytes) / 1048576.0);
  return text;
}

// The pages the sequence held at most against the KV cache's arithmetic for
// `n_positions`: bytes_per_token each (as `dsinfer info` prints it) plus the
// window pages a sequence keeps (its fixed state).
void print_kv_held(const EngineStats& peak, const ModelConfig& config, const KvCache& memory, int64_t n_positions) {
  const int64_t page_tokens = memory.page_tokens();
  const int64_t held = int64_t(peak.pages_held) * memory.page_bytes();
  const int64_t window_held = int64_t(peak.window_pages_held) * KvCache::window_page_bytes(config, memory.options());
  const int64_t fixed = KvCache::fixed_bytes_per_sequence(config, memory.options());
  const int64_t figure = KvCache::bytes_per_token(config, memory.dtype()) * n_positions + fixed;
  const std::string window = fixed == 0 ? "" : " and " + std::to_string(peak.window_pages_held) + " window pages (" +
                                                  mib(window_held) + ")";
  std::fprintf(stderr, "kv held at most (between steps): %d pages of %lld tokens (%s)%s, %s in all; %lld positions at %lld bytes a token%s: "
               "%s (held / that: %.3f)\n",
               peak.pages_held, (long long)page_tokens, mib(held).c_str(), window.c_str(), mib(held + window_held).c_str(),
               (long long)n_positions, (long long)KvCache::bytes_per_token(config, memory.dtype()),
               fixed == 0 ? "" : " plus the fixed state", mib(figure).c_str(), double(held + window_held) / double(figure));
}

// llama.cpp's sampling defaults.
OptionTable run_option_table() {
  return join_options({
      model_option_table(),
      device_option_table(),
      speculation_option_table(),
      tensor_parallel_option_table(),
      {
          {{"-p", "--prompt"}, "TEXT", "", "the prompt to complete"},
          {{"-f", "--file"}, "FILE", "", "read the prompt from FILE"},
          {{"-n", "--n-predict"}, "N", "128", "tokens to generate at most, 1..16777216"},
          {{"--temp"}, "T", "0.8", "sampling temperature; 0: greedy"},
          {{"--seed"}, "N", "0", "the sampler's seed"},
          {{"--top-k"}, "N", "40", "sample among the N likeliest tokens; 0: all"},
          {{"--top-p"}, "P", "0.95", "nucleus sampling's probability mass, 0..1"},
          {{"--min-p"}, "P", "0.05", "drop tokens less likely than P x the likeliest, 0..1"},
          {{"--repeat-penalty"}, "X", "1.0", "penalize tokens seen: a positive logit divided by X, a negative one times X; 1: off"},
          {{"--presence-penalty"}, "X", "0.0", "subtract X from the logits of tokens seen"},
          {{"--frequency-penalty"}, "X", "0.0", "subtract X x its count from a seen token's logit"},
          {{"-b", "--batch-size"}, "N", "512", "prompt tokens a step computes at most, 1..1048576"},
          {{"--chat"}, "", "", "the prompt is a user message, rendered with the chat template"},
          {{"--chat-template"}, "FILE|NAME", "", "with --chat: a Jinja file or a built-in's name (default: the model file's)"},
          {{"--ignore-eos"}, "", "", "go on past the end-of-generation token"},
          {{"--show-token-ids"}, "", "", "print the prompt's and the reply's token ids to stderr after the text"},
      },
  });
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const OptionTable table = run_option_table();
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer run -m MODEL.gguf (-p PROMPT | -f FILE) [options]",
                      "Streams a completion of the prompt to stdout, then the prompt's and the generation's speed to stderr.", table);
  }
  auto ranks = join_tensor_parallel_ranks(args.value(), "run", argc, argv);
  if (!ranks.ok()) return fail(ranks.message());
  // Rank 0 runs the engine; the others follow its steps (engine/step_broadcast.h).
  const bool leader = !ranks.value() || ranks.value()->rank() == 0;
  // The device first: the threads started from here on inherit its cores.
  auto device = claim_device(args.value(), ranks.value().get());
  if (!device.ok()) return fail(device.message());
  auto options = parse_model_options(args.value(), ranks.value().get());
  if (!options.ok()) return fail(options.message());
  const Args& a = args.value();

  std::string prompt = a.get("--prompt");
  const std::string prompt_file = a.get("--file");
  if (!prompt.empty() && !prompt_file.empty()) return fail("give the prompt with -p or with -f, not both");
  if (!prompt_file.empty()) {
    auto text = read_file_text(prompt_file);
    if (!text) return fail("cannot read --file '" + prompt_file + "'");
    prompt = std::move(*text);
  }
  if (prompt.empty()) return fail("missing -p PROMPT or -f FILE");
  GenerationParams params;
  auto n_predict = a.get_int("--n-predict");
  auto temp = a.get_float("--temp");
  auto seed = a.get_int("--seed");
  auto top_k = a.get_int("--top-k");
  auto top_p = a.get_float("--top-p");
  auto min_p = a.get_float("--min-p");
  auto repeat = a.get_float("--repeat-penalty");
  auto presence = a.get_float("--presence-penalty");
  auto frequency = a.get_float("--frequency-penalty");
  auto batch = a.get_int("--batch-size");
  for (const Status& s : {n_predict.status(), temp.status(), seed.status(), top_k.status(), top_p.status(), min_p.status(),
                          repeat.status(), presence.status(), frequency.status(), batch.status()}) {
    if (!s.ok()) return fail(s.message());
  }
  if (n_predict.value() < 1 || n_predict.value() > 1 << 24 || batch.value() < 1 || batch.value() > 1 << 20) {
    return fail("-n must be 1..16777216 and --batch-size 1..1048576");
  }
  if (top_k.value() < 0 || top_k.value() > 1 << 24) return fail("--top-k must be 0..16777216");
  for (const auto* v : {&temp, &top_p, &min_p, &repeat, &presence, &frequency}) {
    if (!std::isfinite(v->value())) return fail("--temp, --top-p, --min-p and the penalties must be finite numbers");
  }
  if (temp.value() < 0 || top_p.value() < 0 || top_p.value() > 1 || min_p.value() < 0 || min_p.value() > 1 || repeat.value() <= 0) {
    return fail("--temp must be >= 0, --top-p and --min-p in [0, 1], --repeat-penalty > 0");
  }
  params.max_tokens = int32_t(n_predict.value());
  params.sampling.temperature = float(temp.value());
  params.sampling.seed = uint64_t(seed.value());
  params.sampling.top_k = int32_t(top_k.value());
  params.sampling.top_p = float(top_p.value());
  params.sampling.min_p = float(min_p.value());
  params.sampling.repetition_penalty = float(repeat.value());
  params.sampling.presence_penalty = float(presence.value());
  params.sampling.frequency_penalty = float(frequency.value());
  params.stop_at_end_of_generation = !a.has("--ignore-eos");

  auto model = load_model(options.value());
  if (!model.ok()) return fail(model.message());
  auto tokenizer = Tokenizer::from_gguf(model.value()->file());
  if (!tokenizer.ok()) return fail(tokenizer.message());
  const Tokenizer& tok = *tokenizer.value();

  std::vector<int32_t> tokens;
  if (a.has("--chat")) {
    auto chat = ChatTemplate::choose(&model.value()->file(), a.get("--chat-template"));
    if (!chat.ok()) return fail(chat.message());
    if (!chat.value()) return fail("the model has no tokenizer.chat_template: give --chat-template FILE|NAME");
    const Vocab& vocab = tok.vocab();
    const ChatSpecialTokens special{vocab.bos != k_no_token ? vocab.tokens[size_t(vocab.bos)] : "",
                                    vocab.eos != k_no_token ? vocab.tokens[size_t(vocab.eos)] : ""};
    ChatInput input;
    input.messages = jinja::Value(jinja::List{jinja::Value(jinja::make_dict({{"role", jinja::Value("user")}, {"content", jinja::Value(prompt)}}))});
    auto text = chat.value()->render(input, special);
    if (!text.ok()) return fail(text.message());
    tokens = tok.encode(text.value(), false, true);
  } else {
    tokens = tok.encode(prompt, true, true);
    if (leader) std::fputs(prompt.c_str(), stdout);
  }

  int64_t n_ctx = options.value().n_ctx;
  if (n_ctx == 0) n_ctx = std::min<int64_t>(model.value()->config().n_ctx_train, 4096);
  n_ctx = std::max<int64_t>(n_ctx, std::min<int64_t>(int64_t(tokens.size()) + params.max_tokens, model.value()->config().n_ctx_train));
  // Generation stops at the end of the context; a prompt that does not fit is an error (below).
  if (int64_t(tokens.size()) < n_ctx && int64_t(tokens.size()) + params.max_tokens > n_ctx) {
    params.max_tokens = int32_t(n_ctx - int64_t(tokens.size()));
  }
  const int64_t page_tokens = options.value().kv.page_tokens;
  auto kv = size_kv_pool(options.value(), model.value()->config(), (n_ctx + page_tokens - 1) / page_tokens, 1, batch.value());
  if (!kv.ok()) return fail(kv.message());
  auto memory = KvCache::create(model.value()->backend(), model.value()->config(), kv.value());
  if (!memory.ok()) return fail(memory.message());
  if (!leader) {
    const Status followed = follow_steps(*model.value(), *memory.value(), *ranks.value());
    return followed.ok() ? 0 : fail(followed.message());
  }
  const std::unique_ptr<StepSender> step_leader = lead_steps(ranks.value().get());  // the others end when it goes
  EngineCoreConfig config;
  config.ranks.sender = step_leader.get();
  config.scheduler = SchedulerConfig{int32_t(batch.value()), 1, int32_t(n_ctx)};
  auto speculation = parse_speculation(args.value());
  if (!speculation.ok()) return fail(speculation.message());
  config.speculation = speculation.value();
  auto draft_model = load_draft_model(config.speculation, options.value(), *model.value(), tok.vocab(), n_ctx);
  if (!draft_model.ok()) return fail(draft_model.message());
  config.draft_model = draft_model.value().get();
  auto mtp = load_mtp_drafter(config.speculation, options.value(), *model.value(), *memory.value());
  if (!mtp.ok()) return fail(mtp.message());
  config.mtp_drafter = mtp.value().get();
  EngineCore core(*model.value(), *memory.value(), config, &tok);
  auto id = core.add(tokens, params);
  if (!id.ok()) return fail(id.message());

  std::vector<int32_t> all_tokens = tokens;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point first = start, last = start;
  int64_t n_generated = 0;
  EngineStats peak;
  while (!core.idle()) {
    auto outputs = core.step();
    if (!outputs.ok()) return fail(outputs.message());
    const EngineStats now = core.stats();
    peak.pages_held = std::max(peak.pages_held, now.pages_held);
    peak.window_pages_held = std::max(peak.window_pages_held, now.window_pages_held);
    for (const StepOutput& o : outputs.value()) {
      last = Clock::now();
      if (n_generated++ == 0) first = last;
      if (o.in_reply) all_tokens.push_back(o.token);  // the end-of-reply token is not part of the reply
      std::fwrite(o.text.data(), 1, o.text.size(), stdout);
      std::fflush(stdout);
    }
  }
  std::fputc('\n', stdout);
  if (a.has("--show-token-ids")) {
    std::string ids = "token ids:";
    for (int32_t t : all_tokens) ids += " " + std::to_string(t);
    std::fprintf(stderr, "%s\n", ids.c_str());
  }
  // The prompt's forward yields the first token; each later token is one decode step.
  const double prompt_seconds = std::chrono::duration<double>(first - start).count();
  const double decode_seconds = std::chrono::duration<double>(last - first).count();
  const int64_t n_decoded = std::max<int64_t>(0, n_generated - 1);
  std::fprintf(stderr, "\nprompt: %zu tokens in %.3f s, %.2f tokens/s\n", tokens.size(), prompt_seconds,
               prompt_seconds > 0 ? double(tokens.size()) / prompt_seconds : 0.0);
  std::fprintf(stderr, "generation: %lld tokens in %.3f s, %.2f tokens/s\n", (long long)n_decoded, decode_seconds,
               decode_seconds > 0 ? double(n_decoded) / decode_seconds : 0.0);
  // The positions written: the prompt and every generated token but the last.
  print_kv_held(peak, model.value()->config(), *memory.value(), int64_t(tokens.size()) + std::max<int64_t>(0, n_generated - 1));
  if (config.speculation.n_draft > 0) {
    const EngineStats stats = core.stats();
    std::fprintf(stderr, "speculative decoding (%s): %lld draft tokens verified, %lld accepted, in %lld steps\n",
                 drafter_name(config), (long long)stats.draft_tokens,
                 (long long)stats.accepted_draft_tokens, (long long)stats.steps);
  }
  return 0;
}

}  // namespace ds
