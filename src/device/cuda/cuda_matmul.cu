// The CUDA backend's matrix kernels for the weight types cuBLAS does not
// read: the activations rounded to the type the reference multiplies with
// (Q8_0, Q8_1, Q8_K, F16, BF16: activation_type_for's pairing, tensor/dtype.h) and each weight
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

// One warp per weight row against up to k_max_tokens rounded activation rows.
__global__ void matvec_kernel(int type, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t n_cols, const float* xa, int64_t n,
                              float* y, int64_t y_stride) {
  const int64_t r = blockIdx.x * int64_t(k_warps) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n_rows) return;
  const uint8_t* row = w + r * row_bytes;
  float acc[k_max_tokens] = {};
  for (int64_t j = lane; j < n_cols; j += 32) {
    const float wj = element(type, row, j);
    for (int t = 0; t < k_max_tokens; ++t) {
      if (t < n) acc[t] = fmaf(wj, xa[t * n_cols + j], acc[t]);
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
  const unsigned blocks = unsigned((w.n_rows + k_warps - 1) / k_warps);
  matvec_kernel<<<blocks, 32 * k_warps, 0, s>>>(int(w.type), w.data, w.row_stride_bytes(), w.n_rows, w.n_cols, xa, n, y, y_stride);
}

void dequantize_rows(cudaStream_t s, const WeightMatrix& w, int64_t first, int64_t n_rows, float* out) {
  if (n_rows > 0) dequantize_rows_kernel<<<unsigned(n_rows), 256, 0, s>>>(int(w.type), w.data, w.row_stride_bytes(), first, w.n_cols, out);
}

}  // namespace ds::cuda
