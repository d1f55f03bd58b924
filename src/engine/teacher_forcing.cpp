#include "engine/teacher_forcing.h"

#include <algorithm>
#include <numeric>

namespace ds {

Result<std::unique_ptr<TeacherForcing>> TeacherForcing::create(Model& model, KvCacheOptions kv, int64_t max_tokens) {
  if (max_tokens <= 0) return Status::error("a teacher-forced run needs at least one token");
  kv.n_pages = (max_tokens + kv.page_tokens - 1) / kv.page_tokens;
  auto cache = KvCache::create(model.backend(), model.config(), kv);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<TeacherForcing>(new TeacherForcing(model, std::move(cache.value()), max_tokens));
}

TeacherForcing::TeacherForcing(Model& model, std::unique_ptr<KvCache> cache, int64_t max_tokens)
    : model_(model), cache_(std::move(cache)), pages_(size_t(cache_->n_pages())), max_tokens_(max_tokens),
      runner_(model, *cache_) {
  std::iota(pages_.begin(), pages_.end(), 0);
}

Status TeacherForcing::run(const int32_t* tokens, int64_t n, int64_t step_tokens, float* logits,
                           const LayerObserver& observer) {
  if (n > max_tokens_) return Status::error("the sequence is longer than the cache made for it");
  const int64_t n_vocab = model_.config().n_vocab;
  const int64_t step = step_tokens > 0 ? step_tokens : n;
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t end = std::min(n, begin + step);
    runner_.begin();
    runner_.add(tokens + begin, int32_t(begin), int32_t(end - begin), {pages_.data(), int32_t(pages_.size())});
    for (int64_t t = 0; t < end - begin; ++t) runner_.want_logits(int32_t(t));
    const Status status = runner_.run(observer);
    if (!status.ok()) return status;
    std::copy(runner_.logits(0), runner_.logits(0) + (end - begin) * n_vocab, logits + begin * n_vocab);
  }
  return Status();
}

}  // namespace ds
