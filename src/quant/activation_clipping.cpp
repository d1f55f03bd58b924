#include "quant/activation_clipping.h"

#include <algorithm>
#include <cmath>

namespace ds {
namespace {

constexpr int k_bins = 2048;
constexpr int k_levels = 128;  // |q| in [0, 127]

double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sum_p = 0, sum_q = 0;
  for (size_t i = 0; i < p.size(); ++i) sum_p += p[i], sum_q += q[i];
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > 0) kl += p[i] / sum_p * std::log((p[i] / sum_p) / (q[i] / sum_q));
  }
  return kl;
}

// TensorRT's entropy calibration over a histogram of |x|: for each candidate
// threshold, P is the histogram up to it with the tail folded into its last
// bin, and Q the same bins without the tail merged into 128 levels and spread
// back over each level's non-empty bins (a bin P holds and Q not gets a
// small floor, as TensorRT smooths); the threshold with the least KL(P || Q)
// wins: clipping loses the folded tail, a wide range loses resolution.
float kl_clip(const std::vector<float>& values, float absmax) {
  std::vector<double> histogram(k_bins, 0.0);
  const double width = double(absmax) / k_bins;
  for (float v : values) histogram[size_t(std::min<double>(k_bins - 1, std::fabs(v) / width))] += 1;
  const double floor = 1e-4 * double(values.size());
  double best = INFINITY;
  int best_bins = k_bins;
  for (int bins = k_levels; bins <= k_bins; ++bins) {
    std::vector<double> p(histogram.begin(), histogram.begin() + bins);
    for (int i = bins; i < k_bins; ++i) p[size_t(bins - 1)] += histogram[size_t(i)];
    std::vector<double> q(size_t(bins), 0.0);
    for (int level = 0; level < k_levels; ++level) {
      const int first = level * bins / k_levels, last = (level + 1) * bins / k_levels;
      double total = 0;
      int nonzero = 0;
      for (int i = first; i < last; ++i) total += histogram[size_t(i)], nonzero += histogram[size_t(i)] > 0;
      for (int i = first; i < last; ++i) q[size_t(i)] = histogram[size_t(i)] > 0 ? total / nonzero : 0;
    }
    for (int i = 0; i < bins; ++i)
      if (p[size_t(i)] > 0 && q[size_t(i)] == 0) q[size_t(i)] = floor;
    const double kl = kl_divergence(p, q);
    if (kl < best) best = kl, best_bins = bins;
  }
  return float((best_bins + 0.5) * width);
}

}  // namespace

std::optional<ClipMethod> parse_clip_method(const std::string& name) {
  if (name == "minmax") return ClipMethod::minmax;
  if (name == "percentile") return ClipMethod::percentile;
  if (name == "kl") return ClipMethod::kl;
  return std::nullopt;
}

const char* clip_method_name(ClipMethod method) {
  switch (method) {
    case ClipMethod::minmax: return "minmax";
    case ClipMethod::percentile: return "percentile";
    case ClipMethod::kl: return "kl";
  }
  return "";
}

float choose_clip(const std::vector<float>& values, float absmax, const ClipChoice& choice) {
  if (absmax <= 0.0f || values.empty() || choice.method == ClipMethod::minmax) return absmax;
  if (choice.method == ClipMethod::kl) return std::min(absmax, kl_clip(values, absmax));
  std::vector<float> magnitudes(values.size());
  for (size_t i = 0; i < values.size(); ++i) magnitudes[i] = std::fabs(values[i]);
  const size_t rank = std::min(magnitudes.size() - 1, size_t(std::ceil(choice.percentile / 100.0 * double(magnitudes.size()))) - 1);
  std::nth_element(magnitudes.begin(), magnitudes.begin() + ptrdiff_t(rank), magnitudes.end());
  return std::max(magnitudes[rank], absmax * 1e-6f);
}

}  // namespace ds
