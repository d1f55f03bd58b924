#include "engine/admission_rule.h"

#include <algorithm>
#include <cmath>

#include "engine/request.h"
#include "model/kv_cache.h"

namespace ds {

AdmissionRule::AdmissionRule(int64_t max_context, int32_t page_tokens, int32_t n_pages, double reserve_fraction, WindowLimits windows)
    : max_context_(max_context),
      page_tokens_(page_tokens),
      n_pages_(n_pages),
      reserve_pages_(int32_t(std::ceil(std::clamp(reserve_fraction, 0.0, 1.0) * n_pages))),
      windows_(windows) {}

int64_t AdmissionRule::max_new_tokens(int64_t n_prompt, int32_t max_tokens) const {
  if (max_tokens != GenerationParams::k_to_context_end) return max_tokens;
  return std::max<int64_t>(max_context_ - n_prompt, 1);
}

Admit AdmissionRule::check(int64_t n_prompt, int32_t max_tokens, int64_t n_free_pages, bool n_prompt_at_least,
                           int64_t n_free_window_pages) const {
  const auto refuse = [](Admit::Verdict verdict, Admit::Limit limit, std::string reason) {
    return Admit{verdict, limit, std::move(reason)};
  };
  const auto at_least = [&](int64_t n) { return std::string(n_prompt_at_least ? "at least " : "") + std::to_string(n); };
  const int64_t n_new = max_new_tokens(n_prompt, max_tokens);
  if (n_prompt + n_new > max_context_) {
    return refuse(Admit::Verdict::never_fits, Admit::Limit::context,
                  "this model's context is " + std::to_string(max_context_) + " tokens; the prompt has " + at_least(n_prompt) +
                      " and max_tokens asks for " + std::to_string(n_new));
  }
  const int64_t prompt_pages = pages_for(n_prompt);
  if (prompt_pages + reserve_pages_ > n_pages_) {
    return refuse(Admit::Verdict::never_fits, Admit::Limit::kv_pool,
                  "the prompt needs " + at_least(prompt_pages) +
                      " KV pages and " + std::to_string(reserve_pages_) + " are kept in reserve, but the whole KV cache holds " +
                      std::to_string(n_pages_) + ": it can never fit (give the KV cache more memory or send a shorter prompt)");
  }
  if (pages_for(n_prompt + n_new) > n_pages_) {
    return refuse(Admit::Verdict::never_fits, Admit::Limit::kv_pool,
                  "the request needs " + std::to_string(pages_for(n_prompt + n_new)) + " KV pages (prompt " + at_least(n_prompt) + " plus " +
                      std::to_string(n_new) + " output tokens), more than the pool's " + std::to_string(n_pages_) +
                      ": it can never fit");
  }
  if (windows_.n_pages > 0) {
    const int64_t first_step = std::min<int64_t>(n_prompt, windows_.max_step_tokens);
    const int64_t window_pages = KvCache::window_pages_for_step(windows_.horizon, page_tokens_, first_step);
    if (window_pages > windows_.n_pages) {
      return refuse(Admit::Verdict::never_fits, Admit::Limit::kv_pool,
                    "a step of " + std::to_string(first_step) + " prompt tokens needs " + std::to_string(window_pages) +
                        " KV window pages, more than the window pool's " + std::to_string(windows_.n_pages) + ": it can never fit");
    }
    if (n_free_window_pages >= 0 && n_free_window_pages < window_pages) {
      return refuse(Admit::Verdict::not_now, Admit::Limit::kv_pool,
                    "the KV window pool is too full to take this prompt now (" + std::to_string(window_pages) + " window pages needed, " +
                        std::to_string(n_free_window_pages) + " of " + std::to_string(windows_.n_pages) + " free)");
    }
  }
  if (n_free_pages >= 0 && n_free_pages < prompt_pages + reserve_pages_) {
    return refuse(Admit::Verdict::not_now, Admit::Limit::kv_pool,
                  "the KV cache is too full to take this prompt now (" + std::to_string(prompt_pages) + " pages and a reserve of " +
                      std::to_string(reserve_pages_) + " needed, " + std::to_string(n_free_pages) + " of " + std::to_string(n_pages_) +
                      " free)");
  }
  return Admit{};
}

}  // namespace ds
