#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ds {

TokenLogprobs token_logprobs(const float* logits, int64_t n_vocab, int32_t chosen, int32_t n_top) {
  const float max = *std::max_element(logits, logits + n_vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - max);
  const float log_norm = max + float(std::log(sum));
  TokenLogprobs out;
  out.logprob = logits[chosen] - log_norm;
  const int64_t k = std::min<int64_t>(std::max(n_top, 0), n_vocab);
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int64_t i = 0; i < k; ++i) out.top.emplace_back(ids[size_t(i)], logits[ids[size_t(i)]] - log_norm);
  return out;
}

}  // namespace ds
