#include "engine/teacher_forcing.h"

#include <algorithm>
#include <numeric>

namespace ds {

Result<std::unique_ptr<TeacherForcing>> TeacherForcing::create(Model& model, KvCacheOptions kv, int64_t max_tokens, RankSteps ranks) {
  if (max_tokens <= 0) return Status::error("a teacher-forced run needs at least one token");
  kv.n_pages = (max_tokens + kv.page_tokens - 1) / kv.page_tokens;
  auto cache = KvCache::create(model.backend(), model.config(), kv);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<TeacherForcing>(new TeacherForcing(model, std::move(cache.value()), max_tokens, ranks));
}

TeacherForcing::TeacherForcing(Model& model, std::unique_ptr<KvCache> cache, int64_t max_tokens, RankSteps ranks)
    : model_(model), cache_(std::move(cache)), pages_(size_t(cache_->n_pages())), max_tokens_(max_tokens),
      runner_(model, *cache_, ranks) {
  std::iota(pages_.begin(), pages_.end(), 0);
}

Status TeacherForcing::run(const int32_t* tokens, int64_t n, int64_t step_tokens, float* logits,
                           const LayerObserver& observer, float* hidden) {
  return run_steps(runner_, tokens, n, step_tokens, logits, observer, hidden, nullptr);
}

Status TeacherForcing::run_nextn(Model& nextn, const int32_t* tokens, int64_t n, int64_t step_tokens, const float* hidden,
                                 float* logits) {
  if (n < 2) return Status::error("a multi-token-prediction layer's first row needs two tokens");
  ModelRunner runner(nextn, *cache_);
  return run_steps(runner, tokens + 1, n - 1, step_tokens, logits, nullptr, nullptr, hidden);
}

Status TeacherForcing::run_steps(ModelRunner& runner, const int32_t* tokens, int64_t n, int64_t step_tokens, float* logits,
                                 const LayerObserver& observer, float* hidden, const float* previous_hidden) {
  if (n > max_tokens_) return Status::error("the sequence is longer than the cache made for it");
  const int64_t n_vocab = model_.config().n_vocab, n_embd = model_.config().n_embd;
  const int64_t step = step_tokens > 0 ? step_tokens : n;
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t end = std::min(n, begin + step);
    runner.begin();
    runner.add(tokens + begin, int32_t(begin), int32_t(end - begin), {pages_.data(), int32_t(pages_.size())});
    if (previous_hidden) runner.add_previous_hidden(previous_hidden + begin * n_embd, int32_t(end - begin));
    for (int64_t t = 0; t < end - begin; ++t) {
      runner.want_logits(int32_t(t));
      if (hidden) runner.want_hidden(int32_t(t));
    }
    const Status status = runner.run(observer);
    if (!status.ok()) return status;
    std::copy(runner.logits(0), runner.logits(0) + (end - begin) * n_vocab, logits + begin * n_vocab);
    if (hidden) std::copy(runner.hidden(0), runner.hidden(0) + (end - begin) * n_embd, hidden + begin * n_embd);
  }
  return Status();
}

}  // namespace ds
