#include "kernels/hyper_connection.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ds {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void hyper_connection_weights(const HyperConnectionParams& p, const float* mu, float* pre, float* post, float* mix) {
  const int64_t hc = p.n_streams;
  for (int64_t i = 0; i < hc; ++i) {
    pre[i] = sigmoid(p.scale[0] * mu[i] + p.base[i]) + p.eps;
    post[i] = 2.0f * sigmoid(p.scale[1] * mu[hc + i] + p.base[hc + i]);
  }
  // Sinkhorn: a softmax over the destinations of each source, then
  // normalisations over the sources of each destination and the destinations
  // of each source in turn (the first of them once more at the start).
  for (int64_t j = 0; j < hc; ++j) {
    float* m = mix + j * hc;
    float max = -INFINITY;
    for (int64_t i = 0; i < hc; ++i) {
      m[i] = p.scale[2] * mu[2 * hc + j * hc + i] + p.base[2 * hc + j * hc + i];
      max = std::max(max, m[i]);
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < hc; ++i) sum += m[i] = std::exp(m[i] - max);
    for (int64_t i = 0; i < hc; ++i) m[i] = m[i] / sum + p.eps;
  }
  const auto over_sources = [&] {
    for (int64_t i = 0; i < hc; ++i) {
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) sum += mix[j * hc + i];
      for (int64_t j = 0; j < hc; ++j) mix[j * hc + i] /= sum + p.eps;
    }
  };
  const auto over_destinations = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      float sum = 0.0f;
      for (int64_t i = 0; i < hc; ++i) sum += mix[j * hc + i];
      for (int64_t i = 0; i < hc; ++i) mix[j * hc + i] /= sum + p.eps;
    }
  };
  over_sources();
  for (int64_t k = 1; k < p.sinkhorn_iterations; ++k) {
    over_destinations();
    over_sources();
  }
}

void hyper_connection_pre(ThreadPool& pool, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                          float* sublayer_in, float* post, float* mix) {
  const int64_t hc = p.n_streams, d = p.dim;
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> pre(static_cast<size_t>(hc));
    for (int64_t t = begin; t < end; ++t) {
      hyper_connection_weights(p, mix_logits + t * p.n_mix(), pre.data(), post + t * hc, mix + t * hc * hc);
      const float* x = streams + t * hc * d;
      float* y = sublayer_in + t * d;
      for (int64_t e = 0; e < d; ++e) y[e] = pre[0] * x[e];
      for (int64_t i = 1; i < hc; ++i) {
        for (int64_t e = 0; e < d; ++e) y[e] += pre[size_t(i)] * x[i * d + e];
      }
    }
  });
}

void hyper_connection_post(ThreadPool& pool, const HyperConnectionParams& p, float* streams, const float* block_out, const float* post,
                           const float* mix, int64_t n) {
  const int64_t hc = p.n_streams, d = p.dim;
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> old(static_cast<size_t>(hc * d));
    for (int64_t t = begin; t < end; ++t) {
      float* x = streams + t * hc * d;
      std::copy_n(x, hc * d, old.data());
      const float* m = mix + t * hc * hc;
      for (int64_t i = 0; i < hc; ++i) {
        float* y = x + i * d;
        const float w = post[t * hc + i];
        for (int64_t e = 0; e < d; ++e) y[e] = w * block_out[t * d + e];
        for (int64_t j = 0; j < hc; ++j) {
          const float mij = m[j * hc + i];
          for (int64_t e = 0; e < d; ++e) y[e] += mij * old[size_t(j * d + e)];
        }
      }
    }
  });
}

void hyper_connection_head(ThreadPool& pool, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                           float* out) {
  const int64_t hc = p.n_streams, d = p.dim;
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* x = streams + t * hc * d;
      float* y = out + t * d;
      for (int64_t i = 0; i < hc; ++i) {
        const float w = sigmoid(p.scale[0] * mix_logits[t * hc + i] + p.base[i]) + p.eps;
        for (int64_t e = 0; e < d; ++e) y[e] = (i == 0 ? 0.0f : y[e]) + w * x[i * d + e];
      }
    }
  });
}

}  // namespace ds
