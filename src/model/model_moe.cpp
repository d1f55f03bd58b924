// DeepSeekMoE: each token goes to its top-k routed experts (softmax or
// sigmoid scores; V3 adds a selection-only bias and group-limited routing),
// weighted, plus the shared experts every token takes.
//
// In a batched step the tokens are grouped by expert, so each active expert's
// weights are read once per step for all its tokens, and an expert with no
// tokens costs nothing. A token's expert outputs are summed in its own slot
// order, so its result does not depend on the other tokens of the step.

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "model/model.h"

namespace ds {
namespace {

// Chooses one token's experts (descending score, ties to the lower index)
// and their weights, as llama.cpp's build_moe_ffn does.
void route(const MoeConfig& moe, const float* logits, const std::vector<float>& bias, int32_t* experts, float* weights) {
  const int64_t n_expert = moe.n_expert;
  std::vector<float> probs(logits, logits + n_expert);
  if (moe.gating == ExpertGating::softmax) {
    softmax(probs.data(), n_expert);
  } else {
    for (float& p : probs) p = 1.0f / (1.0f + std::exp(-p));
  }
  std::vector<float> selection = probs;
  if (!bias.empty()) {
    for (int64_t e = 0; e < n_expert; ++e) selection[size_t(e)] += bias[size_t(e)];
  }
  const auto by_score = [&](const std::vector<float>& score) {
    return [&score](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b); };
  };
  if (moe.n_group > 1) {
    // A group scores the sum of its two best experts; only the best groups stay eligible.
    const int64_t per_group = n_expert / moe.n_group;
    std::vector<float> group_score(static_cast<size_t>(moe.n_group));
    for (int64_t g = 0; g < moe.n_group; ++g) {
      std::vector<float> members(selection.begin() + g * per_group, selection.begin() + (g + 1) * per_group);
      std::partial_sort(members.begin(), members.begin() + std::min<int64_t>(2, per_group), members.end(), std::greater<float>());
      group_score[size_t(g)] = members[0] + (per_group > 1 ? members[1] : 0.0f);
    }
    std::vector<int64_t> groups(static_cast<size_t>(moe.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    std::sort(groups.begin(), groups.end(), by_score(group_score));
    std::vector<bool> eligible(static_cast<size_t>(moe.n_group), false);
    for (int64_t i = 0; i < moe.n_group_used; ++i) eligible[size_t(groups[size_t(i)])] = true;
    for (int64_t e = 0; e < n_expert; ++e) {
      if (!eligible[size_t(e / per_group)]) selection[size_t(e)] = -INFINITY;
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + moe.n_expert_used, order.end(), by_score(selection));
  float sum = 0.0f;
  for (int64_t k = 0; k < moe.n_expert_used; ++k) {
    experts[k] = int32_t(order[size_t(k)]);
    weights[k] = probs[size_t(order[size_t(k)])];
    sum += weights[k];
  }
  for (int64_t k = 0; k < moe.n_expert_used; ++k) {
    if (moe.normalize_weights) weights[k] /= std::max(sum, 6.103515625e-5f);
    if (moe.weights_scale != 1.0f) weights[k] *= moe.weights_scale;
  }
}

}  // namespace

// Each active expert takes its tokens' rows of h_ and writes each (token,
// slot) output, scaled by the routing weight, to that slot of slot_out_. With
// at least two active experts per thread, each thread runs whole experts on
// its own (one stream of weights per thread and no hand-off per matrix: in a
// decode step an expert has one or two tokens and its three matrices take
// ~0.1 ms each); otherwise the experts take turns on the whole pool.
void Model::routed_experts(int64_t layer, int64_t n) {
  const ModelConfig& c = config_;
  const MoeConfig& moe = c.moe;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  const int64_t k = moe.n_expert_used;
  // Tokens by expert: (token, slot) pairs, in token order.
  std::vector<std::vector<int64_t>> assigned(static_cast<size_t>(moe.n_expert));
  for (int64_t i = 0; i < n * k; ++i) assigned[size_t(routed_expert_[size_t(i)])].push_back(i);
  if (int64_t(expert_tokens_.size()) != moe.n_expert) expert_tokens_.assign(size_t(moe.n_expert), 0);
  if (layer == moe.leading_dense) std::fill(expert_tokens_.begin(), expert_tokens_.end(), 0);
  std::vector<int64_t> active;
  for (int64_t e = 0; e < moe.n_expert; ++e) {
    expert_tokens_[size_t(e)] += int64_t(assigned[size_t(e)].size());
    if (!assigned[size_t(e)].empty()) active.push_back(e);
  }
  const auto run_expert = [&](int64_t e, ThreadPool& pool, ExpertWorker& worker) {
    const std::vector<int64_t>& pairs = assigned[size_t(e)];
    const int64_t m = int64_t(pairs.size());
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(h_.data() + pairs[size_t(i)] / k * c.n_embd, c.n_embd, worker.in.data() + i * c.n_embd);
    }
    gated_ffn(pool, worker.ffn, w.expert_gate[size_t(e)], w.expert_up[size_t(e)], w.expert_down[size_t(e)],
              worker.in.data(), m, worker.out.data(), nullptr);  // traced as a whole: experts run on several threads
    for (int64_t i = 0; i < m; ++i) {
      const float weight = routed_weight_[size_t(pairs[size_t(i)])];
      float* slot = slot_out_.data() + pairs[size_t(i)] * c.n_embd;
      const float* out = worker.out.data() + i * c.n_embd;
      for (int64_t d = 0; d < c.n_embd; ++d) slot[d] = out[d] * weight;
    }
  };
  const int64_t n_active = int64_t(active.size());
  if (n_active >= 2 * pool_.n_threads()) {
    pool_.parallel_for_dynamic(n_active, 1, [&](int64_t begin, int64_t end, int thread_index) {
      ExpertWorker& worker = *expert_workers_[size_t(thread_index)];
      for (int64_t i = begin; i < end; ++i) run_expert(active[size_t(i)], worker.serial, worker);
    });
  } else {
    for (int64_t e : active) run_expert(e, pool_, *expert_workers_[0]);
  }
}

void Model::moe_ffn_block(int64_t layer, int64_t n) {
  const ModelConfig& c = config_;
  const MoeConfig& moe = c.moe;
  const LayerWeights& w = weights_->layers[size_t(layer)];
  const int64_t k = moe.n_expert_used;
  rms_norm_rows(x_.data(), w.ffn_norm, n, c.n_embd, c.n_embd, h_.data());

  traced_matmul(w.router, h_.data(), n, router_logits_.data());
  {
    TraceScope scope(trace_, "moe_route");
    pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        route(moe, router_logits_.data() + t * moe.n_expert, w.router_bias, routed_expert_.data() + t * k, routed_weight_.data() + t * k);
      }
    });
  }
  {
    TraceScope scope(trace_, "moe_experts", dtype_name(w.expert_gate[0].type));
    routed_experts(layer, n);
  }
  {
    TraceScope scope(trace_, "moe_sum");  // proj = sum of the slots in slot order
    pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* sum = proj_.data() + t * c.n_embd;
        std::copy_n(slot_out_.data() + t * k * c.n_embd, c.n_embd, sum);
        for (int64_t s = 1; s < k; ++s) add_inplace(sum, slot_out_.data() + (t * k + s) * c.n_embd, c.n_embd);
      }
    });
  }
  if (moe.n_expert_shared > 0) {
    gated_ffn(pool_, ffn_, w.w_gate, w.w_up, w.w_down, h_.data(), n, shared_out_.data(), trace_);
    TraceScope scope(trace_, "add");
    add_inplace(proj_.data(), shared_out_.data(), n * c.n_embd);
  }
  residual_add(proj_.data(), n);
}

}  // namespace ds
