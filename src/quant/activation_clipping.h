#pragma once
// Where a static activation scale clips: the largest |x| seen (min-max), a
// percentile of |x|, or the threshold whose 127-level quantization of the
// |x| histogram loses the least information (KL divergence, the entropy
// calibration of TensorRT's INT8 calibrator).

#include <optional>
#include <string>
#include <vector>

namespace ds {

enum class ClipMethod { minmax, percentile, kl };

struct ClipChoice {
  ClipMethod method = ClipMethod::minmax;
  double percentile = 99.99;  // for ClipMethod::percentile
};

// "minmax", "percentile" (at percentile), "kl"; nullopt for another name.
std::optional<ClipMethod> parse_clip_method(const std::string& name);
const char* clip_method_name(ClipMethod method);

// The clipping threshold for |x| over `values` (a sample), whose largest |x| is absmax.
float choose_clip(const std::vector<float>& values, float absmax, const ClipChoice& choice);

}  // namespace ds
