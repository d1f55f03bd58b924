// The CUDA backend's matrix kernels for the weight types cuBLAS does not
// read: the activations rounded to the type the reference multiplies with
// (Q8_0, Q8_1, Q8_K, F16, BF16: activation_type_for's pairing; MXFP4 with Q8_0, tensor/dtype.h) and each weight
// element dequantized exactly, so that a product sum differs from the
// reference's only by its f32 accumulation.

#include "device/cuda/cuda_common.cuh"
#include "device/cuda/cuda_launch.h"

namespace ds::cuda {
namespace {

constexpr int k_max_tokens = 8;  // matvec's token tile
constexpr int k_warps = 4;

// One block per row; each thread rounds whole blocks of its type.
__global__ void round_activations_kernel(int act_type, const float* x, int64_t x_stride, int64_t n_cols, float* out) {
  const float* row = x + blockIdx.x * x_stride;
  float* to = out + blockIdx.x * n_cols;
  if (act_type == t_q8_0 || act_type == t_q8_1) {
    for (int64_t b = threadIdx.x; b < n_cols / 32; b += blockDim.x) q8_0_block(row + 32 * b, to + 32 * b);
  } else if (act_type == t_q8_k) {
    for (int64_t b = threadIdx.x; b < n_cols / 256; b += blockDim.x) q8_k_block(row + 256 * b, to + 256 * b);
  } else {
    for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
      const float v = row[i];
      to[i] = act_type == t_f16 ? __half2float(__float2half_rn(v)) : act_type == t_bf16 ? bf16_bits_to_float(float_to_bf16_bits(v)) : v;
    }
  }
}

__global__ void to_half_type_kernel(bool bf16, const float* x, int64_t x_stride, int64_t n_cols, uint16_t* out) {
  const float* row = x + blockIdx.x * x_stride;
  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) {
    out[blockIdx.x * n_cols + i] = bf16 ? float_to_bf16_bits(row[i]) : __half_as_ushort(__float2half_rn(row[i]));
  }
}

// One warp per weight row against up to k_max_tokens rounded activation
// rows; each lane takes runs of 32 elements (a block, or a 32nd of a K block),
// decodes them with the block's scales read once, and reads the activations
// as float4. The weight type is a template argument, so no element pays for a
// switch on it.
template <int Type>
__global__ void matvec_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_rows, int64_t n_cols, const float* __restrict__ xa,
                              int64_t n, float* __restrict__ y, int64_t y_stride) {
  const int64_t r = blockIdx.x * int64_t(k_warps) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n_rows) return;
  const uint8_t* row = w + r * row_bytes;
  constexpr int per_block = block_elements(Type);
  float acc[k_max_tokens] = {};
  for (int64_t run = lane; run < n_cols / 32; run += 32) {
    const uint8_t* block = row + (32 * run / per_block) * block_bytes(Type);
    const int first = int(32 * run % per_block);
    float wr[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) wr[i] = element_in_block(Type, block, first + i);
    for (int t = 0; t < k_max_tokens && t < n; ++t) {
      const float4* x4 = reinterpret_cast<const float4*>(xa + t * n_cols + 32 * run);
      float sum = acc[t];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 v = x4[i];
        sum = fmaf(wr[4 * i], v.x, sum);
        sum = fmaf(wr[4 * i + 1], v.y, sum);
        sum = fmaf(wr[4 * i + 2], v.z, sum);
        sum = fmaf(wr[4 * i + 3], v.w, sum);
      }
      acc[t] = sum;
    }
  }
  for (int t = 0; t < k_max_tokens && t < n; ++t) {
    float sum = acc[t];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[t * y_stride + r] = sum;
  }
}

__global__ void dequantize_rows_kernel(int type, const uint8_t* w, int64_t row_bytes, int64_t first, int64_t n_cols, float* out) {
  const uint8_t* row = w + (first + blockIdx.x) * row_bytes;
  for (int64_t j = threadIdx.x; j < n_cols; j += blockDim.x) out[blockIdx.x * n_cols + j] = element(type, row, j);
}

}  // namespace

void round_activations(cudaStream_t s, DType act_type, const float* x, int64_t x_stride, int64_t n, int64_t n_cols, float* out) {
  if (n > 0) round_activations_kernel<<<unsigned(n), 128, 0, s>>>(int(act_type), x, x_stride, n_cols, out);
}

void to_half_type(cudaStream_t s, DType type, const float* x, int64_t x_stride, int64_t n, int64_t n_cols, void* out) {
  if (n > 0) to_half_type_kernel<<<unsigned(n), 256, 0, s>>>(type == DType::bf16, x, x_stride, n_cols, static_cast<uint16_t*>(out));
}

void matvec(cudaStream_t s, const WeightMatrix& w, const float* xa, int64_t n, float* y, int64_t y_stride) {
  DS_CHECK(n <= k_max_tokens, "matvec: more tokens than its tile");
  DS_CHECK(w.n_cols % 32 == 0, "matvec: rows not in runs of 32");
  const unsigned blocks = unsigned((w.n_rows + k_warps - 1) / k_warps);
  const auto launch = [&](auto kernel) { kernel<<<blocks, 32 * k_warps, 0, s>>>(w.data, w.row_stride_bytes(), w.n_rows, w.n_cols, xa, n, y, y_stride); };
  switch (int(w.type)) {
    case t_q4_0: return launch(matvec_kernel<t_q4_0>);
    case t_q4_1: return launch(matvec_kernel<t_q4_1>);
    case t_q5_0: return launch(matvec_kernel<t_q5_0>);
    case t_q5_1: return launch(matvec_kernel<t_q5_1>);
    case t_q8_0: return launch(matvec_kernel<t_q8_0>);
    case t_q4_k: return launch(matvec_kernel<t_q4_k>);
    case t_q5_k: return launch(matvec_kernel<t_q5_k>);
    case t_q6_k: return launch(matvec_kernel<t_q6_k>);
    case t_mxfp4: return launch(matvec_kernel<t_mxfp4>);
    default: DS_CHECK(false, std::string("matvec: no kernel for ") + dtype_name(w.type));
  }
}

void dequantize_rows(cudaStream_t s, const WeightMatrix& w, int64_t first, int64_t n_rows, float* out) {
  if (n_rows > 0) dequantize_rows_kernel<<<unsigned(n_rows), 256, 0, s>>>(int(w.type), w.data, w.row_stride_bytes(), first, w.n_cols, out);
}

}  // namespace ds::cuda
