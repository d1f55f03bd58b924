#include "kernels/moe_route.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "kernels/elementwise.h"

namespace ds {

namespace {

// The top n_expert_used experts by score (probs plus the selection bias), within the best groups.
void choose_experts(const ExpertRouting& routing, const std::vector<float>& probs, const float* bias, int32_t* experts) {
  const int64_t n_expert = routing.n_expert;
  std::vector<float> selection = probs;
  if (bias) {
    for (int64_t e = 0; e < n_expert; ++e) selection[size_t(e)] += bias[e];
  }
  const auto by_score = [&](const std::vector<float>& score) {
    return [&score](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b); };
  };
  if (routing.n_group > 1) {
    // A group scores the sum of its two best experts; only the best groups stay eligible.
    const int64_t per_group = n_expert / routing.n_group;
    std::vector<float> group_score(static_cast<size_t>(routing.n_group));
    for (int64_t g = 0; g < routing.n_group; ++g) {
      std::vector<float> members(selection.begin() + g * per_group, selection.begin() + (g + 1) * per_group);
      std::partial_sort(members.begin(), members.begin() + std::min<int64_t>(2, per_group), members.end(), std::greater<float>());
      group_score[size_t(g)] = members[0] + (per_group > 1 ? members[1] : 0.0f);
    }
    std::vector<int64_t> groups(static_cast<size_t>(routing.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    std::sort(groups.begin(), groups.end(), by_score(group_score));
    std::vector<bool> eligible(static_cast<size_t>(routing.n_group), false);
    for (int64_t i = 0; i < routing.n_group_used; ++i) eligible[size_t(groups[size_t(i)])] = true;
    for (int64_t e = 0; e < n_expert; ++e) {
      if (!eligible[size_t(e / per_group)]) selection[size_t(e)] = -INFINITY;
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + routing.n_expert_used, order.end(), by_score(selection));
  for (int64_t k = 0; k < routing.n_expert_used; ++k) experts[k] = int32_t(order[size_t(k)]);
}

}  // namespace

void moe_route(const ExpertRouting& routing, const float* logits, const float* bias, const int32_t* forced, int32_t* experts,
               float* weights) {
  const int64_t n_expert = routing.n_expert;
  std::vector<float> probs(logits, logits + n_expert);
  if (routing.gating == ExpertGating::softmax) {
    softmax(probs.data(), n_expert);
  } else if (routing.gating == ExpertGating::sigmoid) {
    for (float& p : probs) p = 1.0f / (1.0f + std::exp(-p));
  } else {
    for (float& p : probs) p = std::sqrt(std::max(p, 0.0f) + std::log1p(std::exp(-std::fabs(p))));  // softplus, stably
  }
  if (forced) {
    std::copy_n(forced, routing.n_expert_used, experts);
  } else {
    choose_experts(routing, probs, bias, experts);
  }
  float sum = 0.0f;
  for (int64_t k = 0; k < routing.n_expert_used; ++k) {
    weights[k] = probs[size_t(experts[k])];
    sum += weights[k];
  }
  for (int64_t k = 0; k < routing.n_expert_used; ++k) {
    if (routing.normalize_weights) weights[k] /= std::max(sum, 6.103515625e-5f);
    if (routing.weights_scale != 1.0f) weights[k] *= routing.weights_scale;
  }
}

}  // namespace ds
