#pragma once
// The parameters of DeepSeek-V4's ops, as every backend takes them
// (../shared/DEEPSEEK-V32-V4.md section 2.2; device/backend.h). Pointers are
// weights in the backend's memory.

#include <cstdint>

#include "tensor/rope_params.h"

namespace ds {

// Manifold-constrained hyper-connections: n_streams residual streams of dim
// each per token, mixed around every sublayer.
struct HyperConnectionParams {
  int64_t n_streams = 4;
  int64_t dim = 0;
  const float* scale = nullptr;  // 3 values (pre, post, mix); the head's: 1
  const float* base = nullptr;   // one per mix logit: n_streams * (2 + n_streams); the head's: n_streams
  int64_t sinkhorn_iterations = 20;
  float eps = 1e-6f;
  int64_t n_mix() const { return n_streams * (2 + n_streams); }
};

// A KV compressor: one row of dim per `ratio` tokens, pooled over the
// block's tokens by a per-channel softmax of their scores, normalised, and
// rotated at the block's first position. With overlap (ratio 4), each token
// projects two halves of dim: row b pools the first halves of block b - 1 and
// the second halves of block b. The per-token state row is [kv | score + ape],
// 2 * width() wide.
struct KvCompressorParams {
  int64_t ratio = 0;
  int64_t dim = 0;
  bool overlap = false;
  const float* ape = nullptr;   // [ratio, width()]: added to the score of a token at position p, row p % ratio
  const float* norm = nullptr;  // [dim] the row's RMSNorm weight
  float eps = 1e-6f;
  RopeParams rope;  // over the row's last rope.n_rot elements
  int64_t width() const { return overlap ? 2 * dim : dim; }
};

// Attention over a raw window of the last `window` positions (keys are
// values: one head of head_dim) plus, with ratio > 0, compressed rows (one
// per ratio tokens, visible once their block is complete): all of them, or
// the indexer's selection. Each head's softmax has a sink logit.
struct CompressedAttentionParams {
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t window = 0;
  int64_t ratio = 0;  // 0: the window only
  int64_t top_k = 0;  // the selection's stride per token, where selected
  float scale = 1.0f;
  const float* sinks = nullptr;  // [n_head]
};

}  // namespace ds
