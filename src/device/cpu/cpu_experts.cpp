// The CPU's routed-expert FFN. Tokens are grouped by expert, so each active
// expert's weights are read once per step for all its tokens, and an expert
// with no tokens costs nothing. With at least two active experts per thread,
// each thread runs whole experts on its own (one stream of weights per thread
// and no hand-off per matrix: in a decode step an expert has one or two
// tokens and its three matrices take ~0.1 ms each); otherwise the experts
// take turns on the whole pool. A token's expert outputs are summed in its
// own slot order, so its result does not depend on the other tokens of the step.

#include <algorithm>

#include "device/cpu/cpu_backend.h"
#include "kernels/elementwise.h"
#include "kernels/moe_route.h"

namespace ds {
namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

}  // namespace

// Expert e takes the (token, slot) pairs given and writes each output, scaled
// by its routing weight, to that slot of slot_out_.
void CpuBackend::run_expert(const ExpertWeights& experts, int64_t e, const std::vector<int64_t>& pairs, int64_t k, float swiglu_limit,
                            const float* in, ThreadPool& pool, ExpertWorker& worker) {
  const WeightMatrix &gate = experts.gate[e], &up = experts.up[e], &down = experts.down[e];
  const int64_t n_embd = gate.n_cols, ff = gate.n_rows, m = int64_t(pairs.size());
  grow(worker.in, m * n_embd);
  grow(worker.out, m * n_embd);
  grow(worker.gate, m * ff);
  grow(worker.up, m * ff);
  for (int64_t i = 0; i < m; ++i) std::copy_n(in + pairs[size_t(i)] / k * n_embd, n_embd, worker.in.data() + i * n_embd);
  ds::matmul(pool, gate, worker.in.data(), m, worker.gate.data(), worker.scratch);
  ds::matmul(pool, up, worker.in.data(), m, worker.up.data(), worker.scratch);
  ds::swiglu(worker.gate.data(), worker.up.data(), m * ff, swiglu_limit);
  ds::matmul(pool, down, worker.gate.data(), m, worker.out.data(), worker.scratch);
  for (int64_t i = 0; i < m; ++i) {
    const float weight = routed_weight_[size_t(pairs[size_t(i)])];
    float* slot = slot_out_.data() + pairs[size_t(i)] * n_embd;
    const float* out = worker.out.data() + i * n_embd;
    for (int64_t d = 0; d < n_embd; ++d) slot[d] = out[d] * weight;
  }
}

void CpuBackend::moe_experts(const ExpertRouting& routing, const float* router_logits, const float* bias, const ExpertWeights& experts,
                             const float* in, int64_t n, float* out, int64_t* expert_tokens) {
  const int64_t k = routing.n_expert_used, n_embd = experts.gate[0].n_cols;
  grow(routed_expert_, n * k);
  grow(routed_weight_, n * k);
  grow(slot_out_, n * k * n_embd);
  while (int(expert_workers_.size()) < pool_.n_threads()) expert_workers_.push_back(std::make_unique<ExpertWorker>());
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      moe_route(routing, router_logits + t * routing.n_expert, bias, forced_experts_of(routing, t), routed_expert_.data() + t * k, routed_weight_.data() + t * k);
    }
  });

  // Tokens by expert: (token, slot) pairs, in token order.
  std::vector<std::vector<int64_t>> assigned(static_cast<size_t>(routing.n_expert));
  for (int64_t i = 0; i < n * k; ++i) assigned[size_t(routed_expert_[size_t(i)])].push_back(i);
  std::vector<int64_t> active;
  for (int64_t e = 0; e < routing.n_expert; ++e) {
    expert_tokens[e] += int64_t(assigned[size_t(e)].size());
    if (assigned[size_t(e)].empty()) continue;
    if (experts.gate[e].data) {
      active.push_back(e);
    } else {  // another rank's expert (expert parallel)
      for (int64_t pair : assigned[size_t(e)]) std::fill_n(slot_out_.data() + pair * n_embd, n_embd, 0.0f);
    }
  }
  const int64_t n_active = int64_t(active.size());
  if (n_active >= 2 * pool_.n_threads()) {
    pool_.parallel_for_dynamic(n_active, 1, [&](int64_t begin, int64_t end, int thread_index) {
      ExpertWorker& worker = *expert_workers_[size_t(thread_index)];
      for (int64_t i = begin; i < end; ++i) run_expert(experts, active[size_t(i)], assigned[size_t(active[size_t(i)])], k, routing.swiglu_limit, in, worker.serial, worker);
    });
  } else {
    for (int64_t e : active) run_expert(experts, e, assigned[size_t(e)], k, routing.swiglu_limit, in, pool_, *expert_workers_[0]);
  }

  // out = the sum of each token's slots, in slot order.
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* sum = out + t * n_embd;
      std::copy_n(slot_out_.data() + t * k * n_embd, n_embd, sum);
      for (int64_t s = 1; s < k; ++s) add_inplace(sum, slot_out_.data() + (t * k + s) * n_embd, n_embd);
    }
  });
}

}  // namespace ds
