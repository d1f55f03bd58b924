#pragma once
// `dsinfer quantize`'s work: a GGUF model in F32/F16/BF16 written again with
// each matrix in the type its policy chooses, every metadata key copied. The
// llama.cpp types come out in ggml's layout, readable by llama.cpp; W8A8
// matrices are written as an I8 tensor NAME [n_cols, rows...] with its row
// scales NAME_scale (F32, one per output row), which dsinfer's loader pairs,
// and with a static activation scale NAME_input_scale (F32 [1]) where
// calibration chose one. With a calibration, SmoothQuant folds activation
// outliers into the weights first (quant/smoothing.h). Tensors are produced
// one at a time while the file is written.

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "quant/activation_clipping.h"
#include "quant/calibration.h"
#include "quant/quant_policy.h"

namespace ds {

// The suffixes of a W8A8 matrix's row scales and static activation scale.
inline constexpr const char* k_row_scale_suffix = "_scale";
inline constexpr const char* k_input_scale_suffix = "_input_scale";
inline constexpr const char* k_zero_point_suffix = "_zero_point";  // W8A8_ASYM: I32, one per row

struct QuantizeOptions {
  int n_threads = 2;
  const Calibration* calibration = nullptr;
  float smooth_alpha = 0.0f;                     // SmoothQuant's migration strength (needs calibration); 0: none
  std::optional<ClipChoice> static_activations;  // W8A8 activation scales from calibration; nullopt: per token
  // Called after each tensor with the tensors done and their total.
  std::function<void(size_t done, size_t total)> progress;
};

struct QuantizedTensor {
  std::string name;
  DType from, to;
  bool w8a8 = false;
  bool zero_points = false;  // W8A8_ASYM
  bool fell_back = false;  // the policy's type cannot hold its rows (fallback_type)
  bool smoothed = false;   // rewritten by SmoothQuant's factors
  // W8A8 with calibration: its input's largest |x| (after smoothing) and the static clip (0: per token).
  float input_absmax = 0.0f, input_clip = 0.0f;
  bool calibrated = false;
};

struct QuantizeReport {
  std::vector<QuantizedTensor> tensors;
  uint64_t bytes_in = 0, bytes_out = 0;
};

Result<QuantizeReport> quantize_model(const GgufFile& in, const QuantPolicy& policy, const std::string& out_path,
                                      const QuantizeOptions& options);

}  // namespace ds
