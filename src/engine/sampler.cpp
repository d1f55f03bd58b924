#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace ds {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::apply_penalties(const std::vector<int32_t>& history) {
  const bool active = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                      params_.frequency_penalty != 0.0f;
  if (!active || params_.penalty_last_n == 0) return;
  const size_t window = params_.penalty_last_n < 0 ? history.size()
                                                   : std::min(history.size(), size_t(params_.penalty_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [id, count] : counts) {
    if (id < 0 || id >= int32_t(candidates_.size())) continue;
    float& logit = candidates_[size_t(id)].logit;
    logit = logit > 0.0f ? logit / params_.repetition_penalty : logit * params_.repetition_penalty;
    logit -= float(count) * params_.frequency_penalty + params_.presence_penalty;
  }
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab, const std::vector<int32_t>& history) {
  candidates_.resize(size_t(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) candidates_[size_t(i)] = {int32_t(i), logits[i], 0.0f};
  apply_penalties(history);
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && id < n_vocab) candidates_[size_t(id)].logit += bias;
  }

  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (params_.temperature <= 0.0f) {
    return std::min_element(candidates_.begin(), candidates_.end(), by_logit)->id;
  }

  size_t n = candidates_.size();
  if (params_.top_k > 0 && size_t(params_.top_k) < n) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), by_logit);
    n = size_t(params_.top_k);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Probabilities at temperature 1 decide the top-p and min-p cut-offs.
  auto softmax = [&](float temperature) {
    const float max = candidates_[0].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += (candidates_[i].p = std::exp((candidates_[i].logit - max) / temperature));
    for (size_t i = 0; i < n; ++i) candidates_[i].p = float(candidates_[i].p / sum);
  };
  softmax(1.0f);
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cumulative += candidates_[i].p;
      if (cumulative >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * candidates_[0].p;
    size_t keep = 1;
    while (keep < n && candidates_[keep].p >= threshold) ++keep;
    n = keep;
  }
  softmax(params_.temperature);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  double r = uniform(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= candidates_[i].p;
    if (r <= 0.0) return candidates_[i].id;
  }
  return candidates_[n - 1].id;
}

}  // namespace ds
