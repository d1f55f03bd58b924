// The CPU's DeepSeek-V4 ops (device/backend.h): the kernels on the pool.
#include "device/cpu/cpu_backend.h"
#include "kernels/compressed_attention.h"
#include "kernels/elementwise.h"
#include "kernels/hyper_connection.h"
#include "kernels/kv_compressor.h"
#include "kernels/rope.h"

namespace ds {

void CpuBackend::rope_rows(const RopeParams& rope, const int32_t* positions, int64_t n_ctx, const HeadRows& rows, int64_t n) {
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
    rope_strided(rope, rows.data + begin * rows.token_stride, end - begin, rows.n_heads, rows.head_dim, rows.token_stride,
                 rows.head_stride, positions + begin, n_ctx);
  });
}

void CpuBackend::swiglu(float* gate, float* up, int64_t n, float limit) {
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) { ds::swiglu(gate + begin, up + begin, end - begin, limit); });
}

void CpuBackend::hyper_connection_pre(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                                      float* sublayer_in, float* post, float* mix) {
  ds::hyper_connection_pre(pool_, p, streams, mix_logits, n, sublayer_in, post, mix);
}

void CpuBackend::hyper_connection_post(const HyperConnectionParams& p, float* streams, const float* block_out, const float* post,
                                       const float* mix, int64_t n) {
  ds::hyper_connection_post(pool_, p, streams, block_out, post, mix, n);
}

void CpuBackend::hyper_connection_head(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                                       float* out) {
  ds::hyper_connection_head(pool_, p, streams, mix_logits, n, out);
}

void CpuBackend::kv_compress(const KvCompressorParams& c, const StepIndex& step, int64_t page_tokens, const float* kv, const float* score,
                             const KvLayerView& state, const KvLayerView& rows) {
  ds::kv_compress(pool_, c, kv, score, step.n_tokens, step.positions, step.seq_of_token, step.tables, step.window_tables, page_tokens, state,
                  rows);
}

void CpuBackend::compressed_attention(const CompressedAttentionParams& a, const StepIndex& step, int64_t page_tokens, const float* q,
                                      const KvLayerView& window, const KvLayerView& rows, const int32_t* selected,
                                      const int32_t* n_selected, float* out) {
  ds::compressed_attention(pool_, a, q, step.n_tokens, step.positions, step.seq_of_token, step.tables, step.window_tables, page_tokens,
                           window, rows, selected, n_selected, out);
}

}  // namespace ds
