#pragma once
// Device helpers shared by the CUDA backend's kernels: the GGUF block layouts
// read element by element, and the conversions to the activation and KV types,
// each written to give bit for bit what the host reference (tensor/quantize.cpp)
// gives. The backend is compiled with -fmad=false so that no product and sum
// are contracted into an FMA the reference does not do.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/kv_layer_view.h"
#include "tensor/rope_params.h"

#define DS_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                     \
    const cudaError_t ds_cuda_error = (call);                                                              \
    DS_CHECK(ds_cuda_error == cudaSuccess, std::string(#call) + ": " + cudaGetErrorString(ds_cuda_error)); \
  } while (0)

namespace ds::cuda {

// DType as the kernels switch on it (the enum's values, as plain ints).
enum Type : int {
  t_f32 = 0, t_f16 = 1, t_q4_0 = 2, t_q4_1 = 3, t_q5_0 = 6, t_q5_1 = 7, t_q8_0 = 8, t_q8_1 = 9,
  t_q4_k = 12, t_q5_k = 13, t_q6_k = 14, t_q8_k = 15, t_bf16 = 30, t_mxfp4 = 39,
};

__device__ inline float half_at(const uint8_t* p) { return __half2float(*reinterpret_cast<const __half*>(p)); }

__device__ inline float bf16_bits_to_float(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

// tensor/quantize.cpp's fp32_to_bf16: round to nearest even, NaN kept quiet.
__device__ inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64);
  return uint16_t((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

__device__ inline void k_scale_min(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// A GGUF block of `type`: how many elements it holds and in how many bytes
// (the plain float types are blocks of one).
__host__ __device__ constexpr int block_elements(int type) {
  return type == t_f32 || type == t_f16 || type == t_bf16 ? 1 : type == t_q4_k || type == t_q5_k || type == t_q6_k || type == t_q8_k ? 256 : 32;
}
__host__ __device__ constexpr int block_bytes(int type) {
  switch (type) {
    case t_f32: return 4;
    case t_f16: case t_bf16: return 2;
    case t_q4_0: return 18;
    case t_q4_1: return 20;
    case t_q5_0: return 22;
    case t_q5_1: return 24;
    case t_q8_0: return 34;
    case t_q8_1: return 36;
    case t_q4_k: return 144;
    case t_q5_k: return 176;
    case t_q6_k: return 210;
    case t_q8_k: return 292;
    case t_mxfp4: return 17;
    default: return 0;
  }
}

// Element i of block b, as dequantize_row computes it. Kernels that read
// several elements of one block call this with the same b, so that the
// block's scales are loaded once.
__device__ inline float element_in_block(int type, const uint8_t* b, int i) {
  switch (type) {
    case t_f32: return *reinterpret_cast<const float*>(b);
    case t_f16: return __half2float(*reinterpret_cast<const __half*>(b));
    case t_bf16: return bf16_bits_to_float(*reinterpret_cast<const uint16_t*>(b));
    case t_q4_0: {
      const int q = i < 16 ? (b[2 + i] & 0x0F) : (b[2 + i - 16] >> 4);
      return float(q - 8) * half_at(b);
    }
    case t_q4_1: {
      const int q = i < 16 ? (b[4 + i] & 0x0F) : (b[4 + i - 16] >> 4);
      return float(q) * half_at(b) + half_at(b + 2);
    }
    case t_q5_0:
    case t_q5_1: {
      const bool with_min = type == t_q5_1;
      const uint8_t* qh_bytes = b + (with_min ? 4 : 2);
      const uint32_t qh = uint32_t(qh_bytes[0]) | uint32_t(qh_bytes[1]) << 8 | uint32_t(qh_bytes[2]) << 16 | uint32_t(qh_bytes[3]) << 24;
      const uint8_t* qs = qh_bytes + 4;
      int q;
      if (i < 16) {
        q = (qs[i] & 0x0F) | int(((qh >> i) << 4) & 0x10);
      } else {
        q = (qs[i - 16] >> 4) | int((qh >> (i - 16 + 12)) & 0x10);
      }
      return with_min ? float(q) * half_at(b) + half_at(b + 2) : float(q - 16) * half_at(b);
    }
    case t_q8_0: return float(reinterpret_cast<const int8_t*>(b + 2)[i]) * half_at(b);
    case t_q8_1: return float(reinterpret_cast<const int8_t*>(b + 4)[i]) * half_at(b);
    case t_q8_k: return *reinterpret_cast<const float*>(b) * float(reinterpret_cast<const int8_t*>(b + 4)[i]);
    case t_mxfp4: {  // tensor/quant_blocks.h: an e2m1 code's doubled value times 2^(e - 127) / 2
      const int code = i < 16 ? (b[1 + i] & 0x0F) : (b[1 + i - 16] >> 4);
      const int magnitude = int((0xC8643210u >> (4 * (code & 7))) & 0xF);  // 0, 1, 2, 3, 4, 6, 8, 12
      const uint32_t scale_bits = b[0] < 2 ? 0x00200000u << b[0] : uint32_t(b[0] - 1) << 23;
      return float(code & 8 ? -magnitude : magnitude) * __uint_as_float(scale_bits);
    }
    case t_q4_k:
    case t_q5_k: {
      const bool five = type == t_q5_k;
      const float d = half_at(b), dmin = half_at(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      const int chunk = i / 64, within = i % 64, l = within % 32;
      const bool high = within >= 32;
      int sc, m;
      k_scale_min(2 * chunk + (high ? 1 : 0), scales, &sc, &m);
      const uint8_t byte = qs[32 * chunk + l];
      int q = high ? byte >> 4 : byte & 0xF;
      if (five) q += (qh[l] & ((high ? 2 : 1) << (2 * chunk))) ? 16 : 0;
      return (d * float(sc)) * float(q) - dmin * float(m);
    }
    case t_q6_k: {
      const int half = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
      const uint8_t* ql = b + 64 * half;
      const uint8_t* qh = b + 128 + 32 * half;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half;
      const float d = half_at(b + 208);
      const int low = quarter & 1 ? ql[l + 32] : ql[l];
      const int q = (quarter < 2 ? low & 0xF : low >> 4) | (((qh[l] >> (2 * quarter)) & 3) << 4);
      return (d * float(sc[l / 16 + 2 * quarter])) * float(q - 32);
    }
    default: return __int_as_float(0x7fc00000);  // refused at load (CudaBackend::supports)
  }
}

// Element j of a row in the GGUF layout.
__device__ inline float element(int type, const uint8_t* row, int64_t j) {
  const int n = block_elements(type);
  return element_in_block(type, row + (j / n) * block_bytes(type), int(j % n));
}

// Block b of a row rounded to Q8_0 and back (quantize_q8 then dequantize).
__device__ inline void q8_0_block(const float* x, float* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const float d_rounded = __half2float(__float2half_rn(d));
  for (int j = 0; j < 32; ++j) out[j] = float(int8_t(rintf(x[j] * id))) * d_rounded;
}

// A Q8_0 block stored (the KV cache's type): the same rounding, as bytes.
__device__ inline void q8_0_store(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
  *reinterpret_cast<__half*>(block) = __float2half_rn(d);
  for (int j = 0; j < 32; ++j) reinterpret_cast<int8_t*>(block + 2)[j] = int8_t(rintf(x[j] * id));
}

// A row of n elements stored in a KV cache type (f32, f16, Q8_0) as
// tensor/quantize.cpp's quantize_row stores it, by the block's threads
// together (n a multiple of 32 for Q8_0).
__device__ inline void store_row(DType type, const float* x, int64_t n, uint8_t* to) {
  if (type == DType::f32) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) reinterpret_cast<float*>(to)[i] = x[i];
  } else if (type == DType::f16) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) reinterpret_cast<__half*>(to)[i] = __float2half_rn(x[i]);
  } else {
    for (int64_t b = threadIdx.x; b < n / 32; b += blockDim.x) q8_0_store(x + 32 * b, to + 34 * b);
  }
}

// A block of 256 rounded to Q8_K and back (quantize_q8_k: the first largest magnitude sets the sign).
__device__ inline void q8_k_block(const float* x, float* out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 256; ++j) {
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    for (int j = 0; j < 256; ++j) out[j] = 0.0f;
    return;
  }
  const float iscale = -127.0f / max, d = 1.0f / iscale;
  for (int j = 0; j < 256; ++j) out[j] = d * float(min(127, int(rintf(iscale * x[j]))));
}

// The sum of one value from each thread of the block, in f64 by halves (a
// tree, always in the same order), returned to every thread; `partial` is
// shared memory of blockDim.x doubles (a power of two), free again on return.
__device__ inline double block_sum(double value, double* partial) {
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();
  return total;
}

// kernels/rope.cpp's rope_yarn_ramp.
__device__ inline float yarn_ramp(float low, float high, int i0) {
  const float y = (float(i0 / 2) - low) / fmaxf(0.001f, high - low);
  return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

// Rotates pair i of the n_rot elements at v by the angle of `position`, as
// kernels/rope.cpp does: the angle's running product is the reference's, one
// float multiply per pair below this one.
__device__ inline void rotate_pair(const RopeFactors& f, int n_rot, bool neox, const float* freq_factors, int32_t position, int i, float* v) {
  float theta_extrap = float(position);
  for (int k = 0; k < i; ++k) theta_extrap *= f.theta_scale;
  if (freq_factors) theta_extrap /= freq_factors[i];
  const float theta_interp = f.freq_scale * theta_extrap;
  float theta = theta_interp;
  if (f.ext_factor != 0.0f) {
    const float mix = yarn_ramp(f.corr_low, f.corr_high, 2 * i) * f.ext_factor;
    theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
  }
  const float c = cosf(theta) * f.mscale, s = sinf(theta) * f.mscale;
  const int half = n_rot / 2, a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = x0 * c - x1 * s;
  v[b] = x0 * s + x1 * c;
}

// Byte offset of (position, kv_head) in a layer's K or V memory.
__device__ inline int64_t slot_offset(const KvLayerView& kv, const BlockTableView& table, int64_t position, int64_t kv_head,
                                      int64_t head_bytes) {
  const int64_t page = int64_t(table.pages[position / kv.page_tokens]) * kv.n_kv_heads + kv_head;
  return (page * kv.page_tokens + position % kv.page_tokens) * head_bytes;
}

__device__ inline int64_t kv_head_bytes(const KvLayerView& kv) {
  const int64_t d = kv.kv_dim / kv.n_kv_heads;
  return kv.dtype == DType::f32 ? 4 * d : kv.dtype == DType::f16 ? 2 * d : d / 32 * 34;
}

// DeepSeek-V4's streams (kernels/kv_compressor.h). Compressed row b of a
// stream of one row per `ratio` tokens, in pages of page_tokens tokens: in
// the page of the block's last token.
__device__ inline int64_t compressed_row_offset(const KvLayerView& rows, const BlockTableView& table, int64_t ratio, int64_t page_tokens,
                                                int64_t b) {
  const int64_t token = b * ratio + ratio - 1;
  return (int64_t(table.pages[token / page_tokens]) * rows.page_tokens + token % page_tokens / ratio) * kv_head_bytes(rows);
}

// A compressor's state row of `position`: in the window page of the
// position, at slot position % (the rows the stream keeps per page: a ring
// where they are fewer than the page's tokens).
__device__ inline int64_t state_row_offset(const KvLayerView& state, const BlockTableView& table, int64_t page_tokens, int64_t position) {
  return (int64_t(table.pages[position / page_tokens]) * state.page_tokens + position % state.page_tokens) * kv_head_bytes(state);
}

// n elements rounded to the KV cache's type and back, as the host's attention
// rounds its queries, by the block's threads together (n a multiple of 32 for Q8_0).
__device__ inline void round_to_cache(DType cache, const float* x, int64_t n, float* out) {
  if (cache == DType::q8_0) {
    for (int64_t b = threadIdx.x; b < n / 32; b += blockDim.x) q8_0_block(x + 32 * b, out + 32 * b);
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = cache == DType::f16 ? __half2float(__float2half_rn(x[i])) : x[i];
  }
}

}  // namespace ds::cuda
