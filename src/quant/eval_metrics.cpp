#include "quant/eval_metrics.h"

#include <algorithm>
#include <cmath>

#include "base/status.h"

namespace ds {

void log_softmax(const float* logits, int64_t n, double* out) {
  const double max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max);
  const double log_sum = max + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = double(logits[i]) - log_sum;
}

void EvalMetrics::add(const float* logits, const float* ref_logits, int64_t n_vocab, int32_t target) {
  DS_CHECK(target >= 0 && target < n_vocab);
  logp_.resize(static_cast<size_t>(n_vocab));
  ref_logp_.resize(logp_.size());
  std::vector<double>& logp = logp_;
  std::vector<double>& ref_logp = ref_logp_;
  log_softmax(logits, n_vocab, logp.data());
  nll_sum_ -= logp[size_t(target)];
  ++tokens_;
  if (ref_logits == nullptr) return;
  log_softmax(ref_logits, n_vocab, ref_logp.data());
  ref_nll_sum_ -= ref_logp[size_t(target)];
  double kl = 0;
  for (int64_t i = 0; i < n_vocab; ++i) kl += std::exp(ref_logp[size_t(i)]) * (ref_logp[size_t(i)] - logp[size_t(i)]);
  kl_.push_back(std::max(kl, 0.0));  // a sum of terms that is >= 0 exactly; rounding may leave -1e-17
  top1_same_ += std::max_element(logits, logits + n_vocab) - logits ==
                std::max_element(ref_logits, ref_logits + n_vocab) - ref_logits;
}

EvalSummary EvalMetrics::summary() const {
  EvalSummary s;
  s.tokens = tokens_;
  if (tokens_ == 0) return s;
  s.perplexity = std::exp(nll_sum_ / double(tokens_));
  if (kl_.empty()) return s;
  s.ref_perplexity = std::exp(ref_nll_sum_ / double(tokens_));
  std::vector<double> sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double k : sorted) sum += k;
  s.kl_mean = sum / double(sorted.size());
  // The nearest-rank 99th percentile: the smallest value with at least 99% of tokens at or below it.
  const size_t rank = size_t(std::ceil(0.99 * double(sorted.size())));
  s.kl_p99 = sorted[std::max<size_t>(rank, 1) - 1];
  s.kl_max = sorted.back();
  s.top1_agreement = double(top1_same_) / double(tokens_);
  return s;
}

}  // namespace ds
