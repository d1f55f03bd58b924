#pragma once
// The one rule for whether a request fits, so that no caller keeps its own
// copy of page sizes or context limits:
//
//   never fits  the prompt plus its output is longer than the context; or the
//               prompt's pages plus the reserve, or the whole request's pages,
//               are more than the pool holds
//   not now     the free pages (unheld, cached ones count: they are evictable)
//               are fewer than the prompt's pages plus the reserve; or, for a
//               model with windowed streams, the free window pages are fewer
//               than its first step takes (KvCache::window_pages_for_step)
//   fits        otherwise
//
// The reserve is a fraction of the pool kept free beyond a new prompt's pages,
// so requests already running can grow without being preempted at once. The
// rule is a plain function of limits fixed at construction and a free-page
// count the caller passes, so any thread may ask it: the scheduler applies its
// never-fits part on add(); Engine::admit applies all of it, with the free
// pages of the last step, before a request is queued.

#include <cstdint>
#include <string>

namespace ds {

// The engine's answer to "may this request run?".
struct Admit {
  enum class Verdict { fits, never_fits, not_now };
  enum class Limit { none, context, kv_pool };  // what a refusal is about
  Verdict verdict = Verdict::fits;
  Limit limit = Limit::none;
  std::string reason;  // for the client, with the figures; empty when it fits

  bool fits() const { return verdict == Verdict::fits; }
};

// The window pool's part of the rule: its pages, the horizon, the tokens of a step.
struct WindowLimits {
  int32_t n_pages = 0;  // 0: the model has no windowed streams
  int64_t horizon = 0;
  int32_t max_step_tokens = 0;
};

class AdmissionRule {
 public:
  AdmissionRule(int64_t max_context, int32_t page_tokens, int32_t n_pages, double reserve_fraction, WindowLimits windows = {});

  int64_t max_context() const { return max_context_; }
  int32_t reserve_pages() const { return reserve_pages_; }
  // The output tokens a request of n_prompt tokens may produce when it asks
  // for max_tokens (GenerationParams::k_to_context_end, request.h: the rest
  // of the context, at least one).
  int64_t max_new_tokens(int64_t n_prompt, int32_t max_tokens) const;

  // n_prompt_at_least: the prompt's length is only known to be at least
  // n_prompt (bounded from its bytes, before tokenizing). n_free_pages < 0:
  // unknown, so the answer is fits or never_fits (and the window pool's part too).
  Admit check(int64_t n_prompt, int32_t max_tokens, int64_t n_free_pages, bool n_prompt_at_least = false,
              int64_t n_free_window_pages = -1) const;

 private:
  int64_t pages_for(int64_t n_tokens) const { return (n_tokens + page_tokens_ - 1) / page_tokens_; }

  int64_t max_context_;
  int32_t page_tokens_;
  int32_t n_pages_;
  int32_t reserve_pages_;
  WindowLimits windows_;
};

}  // namespace ds
