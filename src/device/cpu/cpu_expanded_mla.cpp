// Multi-head latent attention in expanded form on the CPU (Backend::
// mla_expanded_attention): for a long chunk of one sequence, each block of
// cached latents is up-projected to head_dim-wide keys and v_dim-wide values
// once, and every query of the chunk passes over them with an online softmax.
// Per position and head that costs nope x kv_lora + v_dim x kv_lora
// multiply-adds once, and then head_dim + v_dim per query instead of the
// absorbed form's (kv_lora + rope) + kv_lora: cheaper from a few hundred
// queries on (model/blocks/mla_attention.cpp chooses).

#include <algorithm>
#include <cstring>

#include "device/cpu/cpu_backend.h"
#include "kernels/matmul.h"

namespace ds {
namespace {

// Cached positions up-projected at a time: keys and values of every head for
// 256 positions of V3's widths take 5 MiB, and the matrix products over them
// run at prefill speed.
constexpr int64_t k_expand_block = 256;
static_assert(k_expand_block % k_flash_key_tile == 0, "blocks start on the key tiles");

}  // namespace

void CpuBackend::mla_expanded_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, int64_t t0,
                                        int64_t n, const float* q, int64_t q_stride, const WeightMatrix* k_up,
                                        const WeightMatrix* v_up, float* out, int64_t out_stride) {
  const int64_t n_head = shape.n_head, head_dim = shape.head_dim, v_dim = shape.value_dim();
  const int64_t nope = k_up[0].n_rows, kv_lora = k_up[0].n_cols, rope = head_dim - nope, row = kv.kv_dim;
  DS_CHECK(kv.n_kv_heads == 1 && !kv.v && row == kv_lora + rope && v_up[0].n_cols == kv_lora && v_up[0].n_rows == v_dim,
           "mla_expanded_attention: the cache rows and the up-projections disagree");
  const BlockTableView& table = step.tables[step.seq_of_token[t0]];
  const int64_t n_ctx = step.positions[t0 + n - 1] + 1;
  mla_latent_.resize(size_t(k_expand_block * row));
  mla_keys_.resize(size_t(n_head * k_expand_block * head_dim));
  mla_values_.resize(size_t(n_head * k_expand_block * v_dim));
  flash_state_.reset(n_head, n, v_dim);
  for (int64_t p0 = 0; p0 < n_ctx; p0 += k_expand_block) {
    const int64_t nk = std::min(k_expand_block, n_ctx - p0);
    kv_read(kv, kv.k, table, 0, p0, nk, mla_latent_.data());
    // keys [n_head][nk][nope | rope]: the up-projected part, then the shared RoPE key beside it.
    ds::matmul_batched(pool_, k_up, n_head, mla_latent_.data(), row, 0, nk, mla_keys_.data(), head_dim, nk * head_dim,
                       matmul_scratch_);
    for (int64_t h = 0; h < n_head; ++h) {
      for (int64_t p = 0; p < nk; ++p) {
        std::memcpy(mla_keys_.data() + (h * nk + p) * head_dim + nope, mla_latent_.data() + p * row + kv_lora,
                    size_t(rope) * sizeof(float));
      }
    }
    ds::matmul_batched(pool_, v_up, n_head, mla_latent_.data(), row, 0, nk, mla_values_.data(), v_dim, nk * v_dim, matmul_scratch_);
    flash_attention_block(pool_, shape, q + t0 * q_stride, q_stride, step.positions + t0, mla_keys_.data(), mla_values_.data(), p0,
                          nk, flash_state_, flash_scratch_);
  }
  flash_attention_finish(pool_, flash_state_, out + t0 * out_stride, out_stride);
}

}  // namespace ds
