#include "quant/smoothing.h"

#include <algorithm>
#include <cmath>

#include "tensor/quantize.h"

namespace ds {
namespace {

struct Group {
  std::string producer;                // a vector (norm) or a matrix whose rows make the input
  std::vector<std::string> consumers;  // the matrices reading it
};

std::vector<Group> groups_of_layer(const std::string& b) {
  return {
      {b + "attn_norm.weight", {b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight", b + "attn_q_a.weight",
                                b + "attn_kv_a_mqa.weight"}},
      {b + "ffn_norm.weight", {b + "ffn_gate.weight", b + "ffn_up.weight", b + "ffn_gate_inp.weight", b + "ffn_gate_exps.weight",
                               b + "ffn_up_exps.weight", b + "ffn_gate_shexp.weight", b + "ffn_up_shexp.weight"}},
      {b + "ffn_up.weight", {b + "ffn_down.weight"}},
      {b + "ffn_up_shexp.weight", {b + "ffn_down_shexp.weight"}},
      {b + "ffn_up_exps.weight", {b + "ffn_down_exps.weight"}},  // each expert's up rows by the same factors
  };
}

// max over rows of |W(r, k)| for every column k of a float matrix.
void column_absmax(const GgufFile& file, const GgufTensorInfo& t, std::vector<float>& out) {
  const int64_t n_cols = t.ne[0], n_rows = t.n_elements() / n_cols, stride = row_bytes(t.type, n_cols);
  std::vector<float> row(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row(t.type, file.tensor_data(t) + r * stride, row.data(), n_cols);
    for (int64_t k = 0; k < n_cols; ++k) out[size_t(k)] = std::max(out[size_t(k)], std::fabs(row[size_t(k)]));
  }
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

}  // namespace

std::map<std::string, TensorTransform> smoothing_transforms(const GgufFile& file, const Calibration& calibration, float alpha,
                                                            const std::function<bool(const std::string&)>& is_w8a8) {
  std::map<std::string, TensorTransform> transforms;
  for (int64_t layer = 0;; ++layer) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    if (!file.find_tensor(b + "attn_norm.weight")) break;
    for (const Group& g : groups_of_layer(b)) {
      const GgufTensorInfo* producer = file.find_tensor(g.producer);
      if (!producer || !is_float(producer->type)) continue;
      std::vector<const GgufTensorInfo*> consumers;
      const InputStatistics* stats = nullptr;
      bool any_w8a8 = false, all_float = true;
      for (const std::string& name : g.consumers) {
        const GgufTensorInfo* t = file.find_tensor(name);
        if (!t) continue;
        consumers.push_back(t);
        any_w8a8 |= is_w8a8(name);
        all_float &= is_float(t->type);
        if (!stats) stats = calibration.find(name);
      }
      if (!any_w8a8 || !all_float || !stats) continue;
      const int64_t n = stats->n_cols;
      std::vector<float> w_absmax(static_cast<size_t>(n), 0.0f);
      bool shapes_agree = true;
      for (const GgufTensorInfo* t : consumers) {
        shapes_agree &= t->ne[0] == n;
        if (shapes_agree) column_absmax(file, *t, w_absmax);
      }
      if (!shapes_agree) continue;
      std::vector<float> s(static_cast<size_t>(n)), inverse(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const double x = stats->channel_absmax[size_t(j)], w = w_absmax[size_t(j)];
        const double factor = x > 0 && w > 0 ? std::pow(x, alpha) / std::pow(w, 1.0 - alpha) : 1.0;
        s[size_t(j)] = float(std::clamp(factor, 1e-5, 1e5));
        inverse[size_t(j)] = 1.0f / s[size_t(j)];
      }
      for (const GgufTensorInfo* t : consumers) transforms[t->name].columns = s;
      // The producer's output channel j is divided by s_j: a norm's element, or a matrix's row.
      if (producer->n_dims == 1) transforms[g.producer].columns = inverse;
      else transforms[g.producer].rows = inverse;
    }
  }
  return transforms;
}

}  // namespace ds
