#pragma once
// One token's hyper-connection weights from its mix logits (kernels/
// hyper_connection.h), compiled by the CPU kernels and by the CUDA backend
// (base/host_device.h): pre and post [n_streams], and mix [n_streams *
// n_streams], mix[j * n_streams + i] the weight of source stream j in
// destination stream i, made doubly stochastic by Sinkhorn.

#include <math.h>

#include "base/host_device.h"
#include "tensor/deepseek4_params.h"

namespace ds {

DS_HOST_DEVICE inline float hyper_connection_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

DS_HOST_DEVICE inline void hyper_connection_weights(const HyperConnectionParams& p, const float* mu, float* pre, float* post, float* mix) {
  const int64_t hc = p.n_streams;
  for (int64_t i = 0; i < hc; ++i) {
    pre[i] = hyper_connection_sigmoid(p.scale[0] * mu[i] + p.base[i]) + p.eps;
    post[i] = 2.0f * hyper_connection_sigmoid(p.scale[1] * mu[hc + i] + p.base[hc + i]);
  }
  // Sinkhorn: a softmax over the destinations of each source, then
  // normalisations over the sources of each destination and the destinations
  // of each source in turn (the first of them once more at the start).
  for (int64_t j = 0; j < hc; ++j) {
    float* m = mix + j * hc;
    float max = -INFINITY;
    for (int64_t i = 0; i < hc; ++i) {
      m[i] = p.scale[2] * mu[2 * hc + j * hc + i] + p.base[2 * hc + j * hc + i];
      max = fmaxf(max, m[i]);
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < hc; ++i) sum += m[i] = expf(m[i] - max);
    for (int64_t i = 0; i < hc; ++i) m[i] = m[i] / sum + p.eps;
  }
  for (int64_t k = 0; k < p.sinkhorn_iterations; ++k) {
    if (k > 0) {  // over the destinations of each source
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int64_t i = 0; i < hc; ++i) sum += mix[j * hc + i];
        for (int64_t i = 0; i < hc; ++i) mix[j * hc + i] /= sum + p.eps;
      }
    }
    for (int64_t i = 0; i < hc; ++i) {  // over the sources of each destination
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) sum += mix[j * hc + i];
      for (int64_t j = 0; j < hc; ++j) mix[j * hc + i] /= sum + p.eps;
    }
  }
}

}  // namespace ds
