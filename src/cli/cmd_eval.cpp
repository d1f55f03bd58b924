// dsinfer eval: how well a model predicts a text, and how far its next-token
// distributions are from a reference model's (the original a quantized file
// was made from): perplexity, KL divergence (mean, 99th percentile), top-1
// agreement. The text is cut into chunks of the context length, each scored
// on its second half, with the first half as context (llama.cpp's
// `perplexity` does the same, so the figures compare with its).

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/progress_bar.h"
#include "cli/model_source.h"
#include "engine/teacher_forcing.h"
#include "quant/eval_metrics.h"
#include "quant/text_corpus.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer eval: %s\n", message.c_str());
  return 1;
}

constexpr int64_t k_default_chunk = 512;

// A model, its tokenizer, and a cache for one chunk.
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TeacherForcing> run;
};

// chunk 0: --ctx-size, else 512 or the model's context if shorter (the reference takes the model's).
// Each model its own KV page size (settle_page_tokens).
Result<LoadedModel> load(const std::string& path, CommonModelOptions options, int64_t& chunk) {
  LoadedModel m;
  options.path = path;
  auto model = load_model(options);
  if (!model.ok()) return model.status();
  m.model = model.take();
  if (chunk == 0) chunk = options.n_ctx > 0 ? options.n_ctx : std::min(k_default_chunk, m.model->config().n_ctx_train);
  auto tokenizer = Tokenizer::from_gguf(m.model->file());
  if (!tokenizer.ok()) return tokenizer.status();
  m.tokenizer = tokenizer.take();
  auto run = TeacherForcing::create(*m.model, options.kv, chunk);
  if (!run.ok()) return run.status();
  m.run = run.take();
  return m;
}

std::vector<int32_t> tokenize(const Tokenizer& tokenizer, const std::vector<std::string>& documents) {
  std::vector<int32_t> tokens;
  for (const std::string& d : documents) {
    const std::vector<int32_t> ids = tokenizer.encode(d, /*add_special=*/false, /*parse_special=*/false);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  return tokens;
}

void print_summary(const EvalSummary& s, bool with_reference) {
  std::printf("tokens scored     %lld\n", (long long)s.tokens);
  std::printf("perplexity        %.4f\n", s.perplexity);
  if (!with_reference) return;
  std::printf("ref perplexity    %.4f\n", s.ref_perplexity);
  std::printf("KL mean           %.6f\n", s.kl_mean);
  std::printf("KL p99            %.6f\n", s.kl_p99);
  std::printf("KL max            %.6f\n", s.kl_max);
  std::printf("top-1 agreement   %.4f\n", s.top1_agreement);
}

nlohmann::json summary_json(const EvalSummary& s, bool with_reference) {
  nlohmann::json j = {{"tokens", s.tokens}, {"perplexity", s.perplexity}};
  j["ref_perplexity"] = with_reference ? nlohmann::json(s.ref_perplexity) : nullptr;
  j["kl_mean"] = with_reference ? nlohmann::json(s.kl_mean) : nullptr;
  j["kl_p99"] = with_reference ? nlohmann::json(s.kl_p99) : nullptr;
  j["kl_max"] = with_reference ? nlohmann::json(s.kl_max) : nullptr;
  j["top1_agreement"] = with_reference ? nlohmann::json(s.top1_agreement) : nullptr;
  return j;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  const OptionTable table = join_options({
      model_option_table(),
      device_option_table(),
      {
          {{"--text"}, "FILE", "", "the text: plain, or JSON lines with a \"text\" each"},
          {{"--ref"}, "FILE", "", "the reference model (the file a quantized one was made from): KL divergence and top-1 agreement"},
          {{"-b", "--batch-size"}, "N", "0", "tokens a forward step takes at most; 0: a chunk in one"},
          {{"--json"}, "", "", "the figures as JSON on stdout"},
      },
  });
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer eval -m MODEL.gguf --text FILE [--ref REF.gguf] [options]",
                      "Perplexity of the model on the text; with --ref, KL divergence and top-1 agreement against the reference.", table);
  }
  const Args& a = args.value();
  if (!a.positional().empty()) return fail("unexpected argument '" + a.positional()[0] + "'");
  if (!a.has("--text")) return fail("--text FILE is required (plain text, or JSONL with a \"text\" per line)");
  auto device = claim_device(a);
  if (!device.ok()) return fail(device.message());
  auto options = parse_model_options(a);
  if (!options.ok()) return fail(options.message());
  auto batch_size = a.get_int("--batch-size");
  if (!batch_size.ok()) return fail(batch_size.message());
  auto documents = read_text_corpus(a.get("--text"));
  if (!documents.ok()) return fail(documents.message());

  int64_t chunk = 0;
  auto model = load(options.value().path, options.value(), chunk);
  if (!model.ok()) return fail(model.message());
  const std::vector<int32_t> text = tokenize(*model.value().tokenizer, documents.value());
  std::optional<LoadedModel> ref;
  std::string ref_path;
  if (!a.get("--ref").empty()) {
    auto source = model_source_path(a.get("--ref"));
    if (!source.ok()) return fail("--ref: " + source.message());
    ref_path = source.take();
    auto loaded = load(ref_path, options.value(), chunk);
    if (!loaded.ok()) return fail("--ref: " + loaded.message());
    ref = loaded.take();
    if (ref->model->config().n_vocab != model.value().model->config().n_vocab ||
        tokenize(*ref->tokenizer, documents.value()) != text)
      return fail("--ref " + ref_path + " does not tokenize the text as the model does: not the same vocabulary");
  }

  // Each chunk starts with BOS where the vocabulary begins sequences with it.
  const std::vector<int32_t> bos = model.value().tokenizer->encode("", /*add_special=*/true, false);
  const int64_t text_per_chunk = chunk - int64_t(bos.size());
  if (text_per_chunk < 2) return fail("--ctx-size " + std::to_string(chunk) + " leaves no room to score");
  int64_t n_chunks = int64_t(text.size()) / text_per_chunk;
  if (n_chunks == 0) {  // a text shorter than one chunk is scored as one short chunk
    if (text.size() < 2) return fail("the text holds fewer than two tokens");
    n_chunks = 1;
  }
  const int64_t n_vocab = model.value().model->config().n_vocab;
  std::vector<float> logits(size_t(chunk * n_vocab)), ref_logits(ref ? logits.size() : 0);
  EvalMetrics metrics;
  ProgressBar progress("eval", n_chunks, "chunks");
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> tokens = bos;
    const int64_t begin = c * text_per_chunk;
    const int64_t end = std::min<int64_t>(int64_t(text.size()), begin + text_per_chunk);
    tokens.insert(tokens.end(), text.begin() + begin, text.begin() + end);
    const int64_t n = int64_t(tokens.size());
    Status status = model.value().run->run(tokens.data(), n, batch_size.value(), logits.data());
    if (status.ok() && ref) status = ref->run->run(tokens.data(), n, batch_size.value(), ref_logits.data());
    if (!status.ok()) return fail(status.message());
    for (int64_t p = n / 2; p + 1 < n; ++p) {
      metrics.add(logits.data() + p * n_vocab, ref ? ref_logits.data() + p * n_vocab : nullptr, n_vocab,
                  tokens[size_t(p + 1)]);
    }
    progress.update(c + 1);
  }
  progress.finish();

  const EvalSummary summary = metrics.summary();
  if (a.has("--json")) {
    nlohmann::json j = summary_json(summary, ref.has_value());
    j["model"] = options.value().path;
    j["reference"] = ref ? nlohmann::json(ref_path) : nullptr;
    j["text"] = a.get("--text");
    j["chunks"] = n_chunks;
    j["chunk_tokens"] = chunk;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("eval %s%s%s on %s: %lld chunks of %lld tokens\n", options.value().path.c_str(), ref ? " against " : "",
                ref_path.c_str(), a.get("--text").c_str(), (long long)n_chunks, (long long)chunk);
    print_summary(summary, ref.has_value());
  }
  return 0;
}

}  // namespace ds
