#pragma once
// What `dsinfer eval` measures of a model's next-token distributions over a
// text: perplexity, and against a reference model (the unquantized original)
// the KL divergence KL(reference || model) per token, its mean and 99th
// percentile, and how often the two agree on the most likely token. These are
// the figures llama.cpp's `perplexity --kl-divergence` reports.

#include <cstdint>
#include <vector>

namespace ds {

struct EvalSummary {
  int64_t tokens = 0;
  double perplexity = 0;
  // The rest are zero without a reference.
  double ref_perplexity = 0;
  double kl_mean = 0;
  double kl_p99 = 0;
  double kl_max = 0;
  double top1_agreement = 0;  // fraction of tokens whose argmax is the reference's
};

class EvalMetrics {
 public:
  // One scored position: the model's logits [n_vocab] and, when there is a
  // reference, the reference's for the same position; `target` is the token
  // the text has next.
  void add(const float* logits, const float* ref_logits, int64_t n_vocab, int32_t target);
  EvalSummary summary() const;

 private:
  double nll_sum_ = 0, ref_nll_sum_ = 0;
  int64_t top1_same_ = 0;
  std::vector<double> kl_;  // one per token with a reference
  int64_t tokens_ = 0;
  std::vector<double> logp_, ref_logp_;  // scratch
};

// log softmax of logits[0..n) into out, in double.
void log_softmax(const float* logits, int64_t n, double* out);

}  // namespace ds
