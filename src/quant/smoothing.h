#pragma once
// SmoothQuant (Xiao et al., 2023): an activation channel with outliers is
// divided by s_j and the weights that read it are multiplied by s_j, so the
// product is unchanged while INT8 activations lose less to the outliers;
// s_j = max|X_j|^alpha / max|W_.j|^(1 - alpha). The division is folded into
// what produced the activations, so the model computes the same thing in
// float and no op is added:
//   attn_norm -> attn_q, attn_k, attn_v (attn_q_a, attn_kv_a_mqa for MLA)
//   ffn_norm  -> ffn_gate, ffn_up, and in MoE layers the router and the
//                shared and routed experts' gate and up
//   ffn_up    -> ffn_down (silu(gate) * up is linear in up's rows); likewise _shexp,
//                and _exps with one set of factors for every expert.
// A group is smoothed only when one of its readers is W8A8 and calibration saw its input.

#include <map>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "quant/calibration.h"

namespace ds {

// Factors to apply while a tensor is rewritten: element (r, k) of a matrix
// times columns[k] (when given) and rows[r % rows.size()] (when given: the
// same factors for each expert of a 3-d tensor); element k of a vector times columns[k].
struct TensorTransform {
  std::vector<float> columns, rows;
};

// The transforms of every smoothed group, by tensor name. is_w8a8 says which
// matrices are written in W8A8.
std::map<std::string, TensorTransform> smoothing_transforms(const GgufFile& file, const Calibration& calibration, float alpha,
                                                            const std::function<bool(const std::string&)>& is_w8a8);

}  // namespace ds
