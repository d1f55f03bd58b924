#include "engine/generator.h"

#include <numeric>

namespace ds {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<std::unique_ptr<Generator>> Generator::create(Model& model, int64_t n_ctx, const KvCacheOptions& kv_options) {
  if (n_ctx <= 0) return Status::error("generate: context size must be positive");
  KvCacheOptions options = kv_options;
  options.n_pages = (n_ctx + options.page_tokens - 1) / options.page_tokens;
  auto cache = KvCache::create(model.config(), options);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<Generator>(new Generator(model, cache.take(), n_ctx));
}

Generator::Generator(Model& model, std::unique_ptr<KvCache> cache, int64_t n_ctx)
    : model_(model), cache_(std::move(cache)), n_ctx_(n_ctx), block_table_(size_t(cache_->n_pages())) {
  std::iota(block_table_.begin(), block_table_.end(), 0);
}

Status Generator::run(const std::vector<int32_t>& tokens, int32_t first_position, bool want_logits) {
  const int32_t n = int32_t(tokens.size());
  batch_.tokens = tokens;
  batch_.positions.resize(size_t(n));
  std::iota(batch_.positions.begin(), batch_.positions.end(), first_position);
  batch_.seq_of_token.assign(size_t(n), 0);
  batch_.block_tables = {BlockTableView{block_table_.data(), int32_t(block_table_.size())}};
  batch_.logit_tokens.clear();
  if (want_logits) batch_.logit_tokens.push_back(n - 1);
  logits_.resize(size_t(model_.config().n_vocab));
  return model_.forward(batch_, *cache_, logits_.data());
}

Result<GenerateStats> Generator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                          const Tokenizer* tokenizer, const TokenCallback& on_token) {
  if (prompt.empty()) return Status::error("generate: the prompt is empty");
  if (int64_t(prompt.size()) >= n_ctx_) {
    return Status::error("generate: the prompt has " + std::to_string(prompt.size()) +
                         " tokens, which does not fit the context of " + std::to_string(n_ctx_));
  }
  GenerateStats stats;
  stats.n_prompt = int64_t(prompt.size());
  Sampler sampler(options.sampling);
  std::vector<int32_t> history = prompt;

  const auto prompt_start = std::chrono::steady_clock::now();
  for (size_t begin = 0; begin < prompt.size(); begin += size_t(options.prefill_chunk)) {
    const size_t end = std::min(prompt.size(), begin + size_t(options.prefill_chunk));
    const std::vector<int32_t> chunk(prompt.begin() + int64_t(begin), prompt.begin() + int64_t(end));
    DS_RETURN_IF_ERROR(run(chunk, int32_t(begin), end == prompt.size()));
  }
  stats.prompt_seconds = seconds_since(prompt_start);

  const auto generate_start = std::chrono::steady_clock::now();
  int32_t position = int32_t(prompt.size());
  while (stats.n_generated < options.max_tokens) {
    const int32_t token = sampler.sample(logits_.data(), model_.config().n_vocab, history);
    ++stats.n_generated;
    history.push_back(token);
    const bool ends = options.stop_at_end_of_generation && tokenizer && tokenizer->is_end_of_generation(token);
    if (ends || !on_token(token)) break;
    if (position + 1 >= n_ctx_ || stats.n_generated >= options.max_tokens) break;
    DS_RETURN_IF_ERROR(run({token}, position++, true));
    ++stats.n_decode_steps;
  }
  stats.generate_seconds = seconds_since(generate_start);
  return stats;
}

}  // namespace ds
