#include "kernels/hyper_connection.h"

#include <algorithm>
#include <vector>

#include "kernels/hyper_connection_weights.h"

namespace ds {

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
        const float w = hyper_connection_sigmoid(p.scale[0] * mix_logits[t * hc + i] + p.base[i]) + p.eps;
        for (int64_t e = 0; e < d; ++e) y[e] = (i == 0 ? 0.0f : y[e]) + w * x[i * d + e];
      }
    }
  });
}

}  // namespace ds
