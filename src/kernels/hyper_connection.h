#pragma once
// DeepSeek-V4's hyper-connections (../shared/DEEPSEEK-V32-V4.md section 2.2):
// each token carries n_streams residual streams; around each sublayer their
// mix logits (a matrix times the normalised streams, computed by the model)
// become the weights that sum the streams into the sublayer's input (pre),
// scale its output into each stream (post), and mix the streams (a
// doubly-stochastic matrix by Sinkhorn). All in f32, as the notes ask.

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/deepseek4_params.h"

namespace ds {

// One token's weights from its mix logits [n_mix]: pre and post [n_streams],
// and mix [n_streams * n_streams], mix[j * n_streams + i] the weight of source
// stream j in destination stream i.
void hyper_connection_weights(const HyperConnectionParams& p, const float* mix_logits, float* pre, float* post, float* mix);

// sublayer_in[t] = sum_i pre_i * streams[t, i]; post [n, n_streams] and
// mix [n, n_streams^2] kept for hyper_connection_post.
void hyper_connection_pre(ThreadPool& pool, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                          float* sublayer_in, float* post, float* mix);

// streams[t, i] = post_i * block_out[t] + sum_j mix[j][i] * streams[t, j].
void hyper_connection_post(ThreadPool& pool, const HyperConnectionParams& p, float* streams, const float* block_out, const float* post,
                           const float* mix, int64_t n);

// The output head's reduction: out[t] = sum_i (sigmoid(scale * logit_i + base_i) + eps) * streams[t, i],
// mix_logits [n, n_streams].
void hyper_connection_head(ThreadPool& pool, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                           float* out);

}  // namespace ds
