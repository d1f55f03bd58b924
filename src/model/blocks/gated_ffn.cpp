#include "model/blocks/gated_ffn.h"

namespace ds {

Status load_ffn(TensorLoader& loader, const std::string& prefix, const std::string& suffix, int64_t ff, int64_t n_embd,
                FfnWeights* w) {
  DS_RETURN_IF_ERROR(loader.matrix(prefix + "ffn_gate" + suffix + ".weight", ff, n_embd, &w->gate, true, Split::rows));
  DS_RETURN_IF_ERROR(loader.matrix(prefix + "ffn_up" + suffix + ".weight", ff, n_embd, &w->up, true, Split::rows));
  return loader.matrix(prefix + "ffn_down" + suffix + ".weight", n_embd, ff, &w->down, true, Split::columns);
}

Status GatedFfn::reserve(Backend& backend, int64_t n, int64_t ff) {
  DS_RETURN_IF_ERROR(gate_.reserve(backend, n * ff));
  return up_.reserve(backend, n * ff);
}

void GatedFfn::run(const ForwardContext& ctx, const FfnWeights& w, const float* in, int64_t n, float* out, float limit) {
  ctx.matmul(w.gate, in, n, gate_.data());
  ctx.matmul(w.up, in, n, up_.data());
  if (limit > 0.0f) {
    TraceScope scope(ctx.trace, "swiglu");
    ctx.backend.swiglu(gate_.data(), up_.data(), n * w.gate.n_rows, limit);
  } else {
    TraceScope scope(ctx.trace, "silu_mul");
    ctx.backend.silu_mul(gate_.data(), up_.data(), n * w.gate.n_rows);
  }
  ctx.matmul(w.down, gate_.data(), n, out);
}

}  // namespace ds
