#include "engine/draft_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ds {
namespace {

// Catch-up tokens per forward, all sequences together, and forwards per
// proposal: a long prompt is prefilled into the draft model over several
// steps (a sequence drafts once it has caught up), so no step of the engine
// waits on more than 2,048 tokens of it.
constexpr int32_t k_catch_up_tokens = 512;
constexpr int k_catch_up_forwards = 4;

}  // namespace

int32_t confident_token(const float* logits, int64_t n_vocab, float min_probability) {
  const float* top = std::max_element(logits, logits + n_vocab);
  if (min_probability <= 0.0f) return int32_t(top - logits);
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - double(*top));
  return 1.0 / sum >= min_probability ? int32_t(top - logits) : -1;
}

Result<std::unique_ptr<DraftModel>> DraftModel::create(std::unique_ptr<Model> model, const KvCacheOptions& kv,
                                                      float min_probability) {
  if (kv.n_pages < 1) return Status::error("the draft model's KV pool needs at least one page");
  auto cache = KvCache::create(model->backend(), model->config(), kv);
  if (!cache.ok()) return Status::error("draft model: " + cache.message());
  return std::unique_ptr<DraftModel>(new DraftModel(std::move(model), std::move(cache.value()), min_probability));
}

DraftModel::DraftModel(std::unique_ptr<Model> model, std::unique_ptr<KvCache> cache, float min_probability)
    : model_(std::move(model)),
      cache_(std::move(cache)),
      runner_(*model_, *cache_),
      min_probability_(min_probability),
      free_pages_(size_t(cache_->n_pages())) {
  // Taken from the back: page 0 first.
  std::iota(free_pages_.rbegin(), free_pages_.rend(), 0);
}

bool DraftModel::reserve(SequenceCache& s, int64_t n_positions) {
  const int64_t needed = (n_positions + cache_->page_tokens() - 1) / cache_->page_tokens() - int64_t(s.pages.size());
  if (needed > int64_t(free_pages_.size())) return false;
  for (int64_t i = 0; i < needed; ++i) {
    s.pages.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  return true;
}

void DraftModel::forget(int64_t id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  free_pages_.insert(free_pages_.end(), it->second.pages.begin(), it->second.pages.end());
  sequences_.erase(it);
}

Status DraftModel::propose(const std::vector<DraftRequest>& requests) {
  struct Drafting {
    const DraftRequest* request;
    SequenceCache* cache;
    int32_t next;  // the next position to compute
  };
  std::vector<Drafting> drafting;
  for (const DraftRequest& r : requests) {
    r.draft->clear();
    const std::vector<int32_t>& tokens = *r.tokens;
    if (tokens.empty() || r.max_tokens < 1) continue;
    SequenceCache& s = sequences_[r.id];
    // The cache holds what agrees with the tokens; the last token is computed
    // again in any case, for the logits of the first draft token.
    const auto agree = std::mismatch(s.tokens.begin(), s.tokens.end(), tokens.begin(), tokens.end()).first - s.tokens.begin();
    s.tokens.resize(size_t(std::min<int64_t>(agree, int64_t(tokens.size()) - 1)));
    // Every draft token but the last is fed back.
    if (!reserve(s, int64_t(tokens.size()) + r.max_tokens - 1)) continue;
    drafting.push_back({&r, &s, int32_t(s.tokens.size())});
  }
  const int64_t n_vocab = model_->config().n_vocab;
  const auto table = [](SequenceCache& s) { return BlockTableView{s.pages.data(), int32_t(s.pages.size())}; };
  // The draft's next token from logit row `row`, if confident; a draft
  // without it falls out of the rounds below (its size no longer matches).
  const auto propose_token = [&](Drafting& d, int64_t row) {
    const int32_t token = confident_token(runner_.logits(row), n_vocab, min_probability_);
    if (token >= 0) d.request->draft->push_back(token);
  };
  const auto fail = [&](const Status& status) {
    for (Drafting& d : drafting) d.request->draft->clear(), d.cache->tokens.clear();
    return status;
  };
  // Catch up, k_catch_up_tokens per forward; a sequence's last chunk yields
  // its first draft token.
  for (int forward = 0; forward < k_catch_up_forwards; ++forward) {
    runner_.begin();
    std::vector<Drafting*> finishing;
    int32_t budget = k_catch_up_tokens;
    for (Drafting& d : drafting) {
      const std::vector<int32_t>& tokens = *d.request->tokens;
      const int32_t n = std::min<int32_t>(budget, int32_t(tokens.size()) - d.next);
      if (n <= 0) continue;
      budget -= n;
      const int32_t first = runner_.add(tokens.data() + d.next, d.next, n, table(*d.cache));
      d.cache->tokens.insert(d.cache->tokens.end(), tokens.begin() + d.next, tokens.begin() + d.next + n);
      d.next += n;
      if (d.next == int32_t(tokens.size())) {
        runner_.want_logits(first + n - 1);
        finishing.push_back(&d);
      }
    }
    if (runner_.n_tokens() == 0) break;
    const Status status = runner_.run();
    if (!status.ok()) return fail(status);
    for (size_t i = 0; i < finishing.size(); ++i) propose_token(*finishing[i], int64_t(i));
  }
  // Then one token per forward: draft token j - 1 in, token j out.
  for (int32_t j = 1;; ++j) {
    runner_.begin();
    std::vector<Drafting*> extending;
    for (Drafting& d : drafting) {
      std::vector<int32_t>& draft = *d.request->draft;
      if (int32_t(draft.size()) != j || j >= d.request->max_tokens) continue;
      const int32_t position = int32_t(d.request->tokens->size()) + j - 1;
      runner_.want_logits(runner_.add(&draft[size_t(j - 1)], position, 1, table(*d.cache)));
      d.cache->tokens.push_back(draft[size_t(j - 1)]);
      extending.push_back(&d);
    }
    if (extending.empty()) break;
    const Status status = runner_.run();
    if (!status.ok()) return fail(status);
    for (size_t i = 0; i < extending.size(); ++i) propose_token(*extending[i], int64_t(i));
  }
  return Status();
}

}  // namespace ds
