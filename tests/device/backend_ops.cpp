// Every op of the device layer, on every backend this build has, against the
// host reference (llama.cpp's test-backend-ops is the model): one case per op,
// shape and dtype. Each case runs the op in the backend's memory, copies the
// result back, and measures the normalised error
//
//   e = max_j |got_j - want_j| / S_j
//
// where S_j is the magnitude the output's rounding scales with (for a sum of
// products, the sum of the products' absolute values; for an element-wise op,
// |want_j|). Each op states its bound on e from how it computes: 0 for ops
// that only move or add values exactly, a few units of f32 rounding (u =
// 2^-24) for element-wise functions, (K + 1)·u for an f32-accumulated sum of
// K products (the worst case of recursive summation, Higham's γ_K). A
// case fails when e exceeds its bound.
//
//   dsinfer_backend_ops [test|perf] [--op NAME]
//
// perf runs larger shapes and prints time, GB/s and GFLOP/s per op beside the
// machine's limit: the memory read bandwidth measured here for the CPU, the
// device's own figure (memory clock and bus width) for a GPU.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device/backend.h"
#include "kernels/cpu_features.h"
#include "kernels/flash_attention.h"
#include "kernels/hyper_connection.h"
#include "kernels/interleaved_rows.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/moe_route.h"
#include "kernels/rope.h"
#include "kernels/sparse_attention.h"
#include "kernels/vec_dot.h"
#include "parallel/device_ranks.h"
#include "support/one_rank_collective.h"
#include "support/random_tensors.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

constexpr double k_u = 0x1p-24;  // f32 unit roundoff

struct Outcome {
  Outcome(double e, double b) : error(e), bound(b) {}
  double error;      // e above
  double bound;
  std::string note;  // what failed besides e, if anything
};

// e over all outputs; s: S_j per output.
double normalised_error(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& s) {
  double e = 0.0;
  for (size_t j = 0; j < want.size(); ++j) {
    const double diff = std::fabs(double(got[j]) - double(want[j]));
    if (diff == 0.0) continue;
    if (!std::isfinite(diff)) return INFINITY;
    e = std::max(e, diff / std::max(s[j], 1e-30));
  }
  return e;
}

std::vector<double> magnitudes(const std::vector<float>& want) {
  std::vector<double> s(want.size());
  for (size_t j = 0; j < want.size(); ++j) s[j] = std::fabs(double(want[j]));
  return s;
}

// W8A8 row scales for the I8 cases: a spread of magnitudes, the same every run.
std::vector<float> i8_row_scales(int64_t n_rows) {
  std::vector<float> s(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) s[size_t(r)] = 0.004f * float(1 + r % 7);
  return s;
}

// Buffers in a backend's memory, held for one case.
class DeviceData {
 public:
  explicit DeviceData(Backend& backend) : backend_(backend) {}
  uint8_t* bytes(const void* host, size_t n) {
    auto buffer = backend_.allocate(std::max<size_t>(n, 64));
    DS_CHECK(buffer.ok(), buffer.message());
    uint8_t* data = buffer.value().data();
    if (host) backend_.upload(data, host, n);
    buffers_.push_back(buffer.take());
    return data;
  }
  float* floats(const std::vector<float>& host) { return reinterpret_cast<float*>(bytes(host.data(), host.size() * sizeof(float))); }
  float* zeros(size_t n) { return floats(std::vector<float>(n, 0.0f)); }
  std::vector<float> read(const float* data, size_t n) {
    std::vector<float> host(n);
    backend_.download(host.data(), data, n * sizeof(float));
    return host;
  }
  // A matrix stored as the backend stores it, repacked when `repack` and the
  // backend has a layout for it; host: the same rows in the GGUF layout (I8:
  // with i8_row_scales in the backend's memory).
  WeightMatrix matrix(DType type, int64_t n_rows, int64_t n_cols, const std::vector<uint8_t>& rows, bool repack) {
    uint8_t* data = bytes(nullptr, rows.size());
    const bool repacked = repack && backend_.repacks(type, n_rows, n_cols);
    backend_.store_matrix(type, n_rows, n_cols, rows.data(), data, repacked);
    WeightMatrix w{type, n_rows, n_cols, data, repacked};
    if (type == DType::i8) w.row_scales = floats(i8_row_scales(n_rows));
    return w;
  }

 private:
  Backend& backend_;
  std::vector<DeviceBuffer> buffers_;
};

std::vector<float> dequantized(DType type, const std::vector<uint8_t>& rows, int64_t n_rows, int64_t n_cols) {
  std::vector<float> out(size_t(n_rows * n_cols));
  const std::vector<float> scales = type == DType::i8 ? i8_row_scales(n_rows) : std::vector<float>();
  for (int64_t r = 0; r < n_rows; ++r) {
    if (type == DType::i8) {
      for (int64_t i = 0; i < n_cols; ++i) out[size_t(r * n_cols + i)] = float(int8_t(rows[size_t(r * n_cols + i)])) * scales[size_t(r)];
    } else {
      dequantize_row(type, rows.data() + r * row_bytes(type, n_cols), out.data() + r * n_cols, n_cols);
    }
  }
  return out;
}

// x as the matmul kernels see it: converted to the weight type's activation type and back.
std::vector<float> as_activations(DType weight_type, const std::vector<float>& x, int64_t n_cols) {
  const DType act = activation_type_for(weight_type);
  std::vector<float> out(x.size());
  std::vector<uint8_t> row(size_t(row_bytes(act, n_cols)));
  for (size_t r = 0; r * size_t(n_cols) < x.size(); ++r) {
    if (act == DType::i8) {
      const auto* q = reinterpret_cast<int8_t*>(row.data());
      const float scale = quantize_int8_row(x.data() + r * n_cols, n_cols, reinterpret_cast<int8_t*>(row.data()));
      for (int64_t i = 0; i < n_cols; ++i) out[r * n_cols + size_t(i)] = float(q[i]) * scale;
      continue;
    }
    quantize_row(act, x.data() + r * n_cols, row.data(), n_cols);
    dequantize_row(act, row.data(), out.data() + r * n_cols, n_cols);
  }
  return out;
}

// S_j of y = x · wᵀ: sum_i |x_i w_ji| over the converted operands.
std::vector<double> product_magnitudes(const std::vector<float>& w, const std::vector<float>& x, int64_t n_rows, int64_t n_cols,
                                       int64_t n_tokens) {
  std::vector<double> s(size_t(n_rows * n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < n_rows; ++r) {
      double sum = 0.0;
      for (int64_t i = 0; i < n_cols; ++i) sum += std::fabs(double(w[size_t(r * n_cols + i)]) * x[size_t(t * n_cols + i)]);
      s[size_t(t * n_rows + r)] = sum;
    }
  }
  return s;
}

// The bound of a K-term product sum: γ_K, and for Q8_1 activations the f16
// rounding of the stored d·sum(q) that the *_1 types' min term uses.
double matmul_bound(DType weight_type, int64_t k) {
  return double(k + 1) * k_u + (activation_type_for(weight_type) == DType::q8_1 ? 2e-3 : 0.0);
}

class OpCase {
 public:
  virtual ~OpCase() = default;
  std::string op, shape, dtype;
  double flops = 0.0, bytes = 0.0;  // per run, for perf
  // False where the backend does not run the case: a weight type it refuses
  // (a model of it would not load there), a form it does not have.
  virtual bool supported(const Backend& backend) const { return true; }
  virtual const char* not_run_reason() const { return "the backend does not run this case"; }
  virtual void setup(Backend& backend, DeviceData& data) = 0;
  virtual void run(Backend& backend) = 0;
  virtual Outcome check(Backend& backend, DeviceData& data) = 0;
};

// perf: `copies` stores of the matrix taken in turn, so that the weights come
// from memory as a model's do, not from a cache that holds one matrix.
class MatmulCase : public OpCase {
 public:
  MatmulCase(DType type, int64_t rows, int64_t cols, int64_t tokens, bool repack, int copies = 1)
      : type_(type), rows_(rows), cols_(cols), tokens_(tokens), repack_(repack), copies_(copies) {
    op = "matmul";
    shape = std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(tokens);
    dtype = std::string(dtype_name(type)) + (repack ? "" : " rows");
    flops = 2.0 * double(rows * cols * tokens);
    bytes = double(row_bytes(type, cols) * rows + 4 * (cols + rows) * tokens);
  }
  bool supported(const Backend& b) const override { return b.supports(type_); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(rows_ * 31 + cols_ + tokens_));
    w_rows_ = random_weights(rng, type_, rows_, cols_);
    x_ = random_floats(rng, tokens_ * cols_);
    for (int c = 0; c < copies_; ++c) w_.push_back(data.matrix(type_, rows_, cols_, w_rows_, repack_));
    x_dev_ = data.floats(x_);
    y_dev_ = data.zeros(size_t(rows_ * tokens_));
  }
  void run(Backend& b) override { b.matmul(w_[size_t(next_++ % copies_)], x_dev_, tokens_, y_dev_); }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<float> want(size_t(rows_ * tokens_));
    WeightMatrix host{type_, rows_, cols_, w_rows_.data()};
    const std::vector<float> scales = i8_row_scales(rows_);
    if (type_ == DType::i8) host.row_scales = scales.data();
    matmul_reference(host, x_.data(), tokens_, want.data());
    const auto s = product_magnitudes(dequantized(type_, w_rows_, rows_, cols_), as_activations(type_, x_, cols_), rows_, cols_, tokens_);
    return {normalised_error(data.read(y_dev_, want.size()), want, s), matmul_bound(type_, cols_)};
  }

 protected:
  DType type_;
  int64_t rows_, cols_, tokens_;
  bool repack_;
  int copies_;
  int64_t next_ = 0;
  std::vector<uint8_t> w_rows_;
  std::vector<float> x_;
  std::vector<WeightMatrix> w_;
  float *x_dev_ = nullptr, *y_dev_ = nullptr;
};

// A step's tokens against each token alone, bit for bit, besides meeting the
// reference's bound (the matmul's batch invariance across kernels):
//   amx_tiles:    a step's whole tiles of 16 tokens run on AMX, a token alone
//                 on the VNNI tiles (AVX2's for the K types); BF16 runs on
//                 AMX-BF16 at every token count, padded to whole tiles: a
//                 token's outputs must not depend on the step's other tokens.
//                 Run on the CPU backend with AMX only; elsewhere "not run: no AMX".
//   pair_kernels: a step of k_pair_min_tokens or more runs two 8-row groups
//                 at a time in 512-bit registers, a token alone on the group
//                 kernels. Run where the CPU has them; elsewhere "not run: no
//                 AVX-512 pair kernels".
class StepEqualsAloneCase : public MatmulCase {
 public:
  StepEqualsAloneCase(const char* kernels, DType type, int64_t rows, int64_t cols, int64_t tokens)
      : MatmulCase(type, rows, cols, tokens, true), amx_(std::string(kernels) == "amx_tiles") {
    op = kernels;
  }
  bool supported(const Backend& b) const override {
    const bool cpu_has = amx_ ? (type_ == DType::bf16 ? use_amx_bf16_kernels() : use_amx_kernels()) : interleaved_pair_kernel(type_) != nullptr;
    return cpu_has && b.name().rfind("cpu", 0) == 0 && b.supports(type_);
  }
  const char* not_run_reason() const override { return amx_ ? "not run: no AMX" : "not run: no AVX-512 pair kernels"; }
  void setup(Backend& b, DeviceData& data) override {
    MatmulCase::setup(b, data);
    alone_dev_ = data.zeros(size_t(rows_ * tokens_));
  }
  void run(Backend& b) override {
    MatmulCase::run(b);
    for (int64_t t = 0; t < tokens_; ++t) b.matmul(w_[0], x_dev_ + t * cols_, 1, alone_dev_ + t * rows_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    Outcome outcome = MatmulCase::check(b, data);
    const std::vector<float> step = data.read(y_dev_, size_t(rows_ * tokens_)), alone = data.read(alone_dev_, step.size());
    if (std::memcmp(step.data(), alone.data(), step.size() * sizeof(float)) != 0) outcome.note = "the step's outputs differ from each token's alone";
    if (!w_[0].repacked) outcome.note = "the matrix was not laid out for the kernels: rows off its groups";
    return outcome;
  }

 private:
  bool amx_;
  float* alone_dev_ = nullptr;
};

// Per-head matrices against the heads' strided rows (MLA's k_b and v_b).
class MatmulBatchedCase : public OpCase {
 public:
  MatmulBatchedCase(DType type, int64_t heads, int64_t rows, int64_t cols, int64_t tokens)
      : type_(type), heads_(heads), rows_(rows), cols_(cols), tokens_(tokens) {
    op = "matmul_batched";
    shape = std::to_string(heads) + "x" + std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(tokens);
    dtype = dtype_name(type);
    flops = 2.0 * double(heads * rows * cols * tokens);
    bytes = double(heads * (row_bytes(type, cols) * rows + 4 * (cols + rows) * tokens));
  }
  // x rows (head, token) at head * x_head + token * x_token, padded; y likewise.
  int64_t x_head() const { return cols_ + 16; }
  int64_t x_token() const { return heads_ * x_head() + 8; }
  int64_t y_head() const { return rows_ + 4; }
  int64_t y_token() const { return heads_ * y_head(); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(heads_ * 7 + rows_ + tokens_));
    for (int64_t h = 0; h < heads_; ++h) {
      w_rows_.push_back(random_weights(rng, type_, rows_, cols_));
      w_.push_back(data.matrix(type_, rows_, cols_, w_rows_.back(), true));
    }
    x_ = random_floats(rng, tokens_ * x_token());
    x_dev_ = data.floats(x_);
    y_dev_ = data.zeros(size_t(tokens_ * y_token()));
  }
  void run(Backend& b) override {
    b.matmul_batched(w_.data(), heads_, x_dev_, x_token(), x_head(), tokens_, y_dev_, y_token(), y_head());
  }
  Outcome check(Backend& b, DeviceData& data) override {
    const std::vector<float> all = data.read(y_dev_, size_t(tokens_ * y_token()));
    std::vector<float> got, want;
    std::vector<double> s;
    for (int64_t h = 0; h < heads_; ++h) {
      std::vector<float> x(size_t(tokens_ * cols_)), y(size_t(tokens_ * rows_));
      for (int64_t t = 0; t < tokens_; ++t) std::copy_n(x_.data() + t * x_token() + h * x_head(), cols_, x.data() + t * cols_);
      matmul_reference(WeightMatrix{type_, rows_, cols_, w_rows_[size_t(h)].data()}, x.data(), tokens_, y.data());
      const auto head_s = product_magnitudes(dequantized(type_, w_rows_[size_t(h)], rows_, cols_), as_activations(type_, x, cols_), rows_,
                                             cols_, tokens_);
      for (int64_t t = 0; t < tokens_; ++t) {
        for (int64_t r = 0; r < rows_; ++r) {
          got.push_back(all[size_t(t * y_token() + h * y_head() + r)]);
          want.push_back(y[size_t(t * rows_ + r)]);
          s.push_back(head_s[size_t(t * rows_ + r)]);
        }
      }
    }
    Outcome outcome{normalised_error(got, want, s), matmul_bound(type_, cols_)};
    // The padding between heads and tokens stays as it was.
    for (int64_t t = 0; t < tokens_; ++t) {
      for (int64_t h = 0; h < heads_; ++h) {
        for (int64_t r = rows_; r < y_head(); ++r) {
          if (all[size_t(t * y_token() + h * y_head() + r)] != 0.0f) outcome.note = "wrote into the padding between heads";
        }
      }
    }
    return outcome;
  }

 private:
  DType type_;
  int64_t heads_, rows_, cols_, tokens_;
  std::vector<std::vector<uint8_t>> w_rows_;
  std::vector<WeightMatrix> w_;
  std::vector<float> x_;
  float *x_dev_ = nullptr, *y_dev_ = nullptr;
};

// Dequantization is specified bit for bit by the format's order of
// operations: every backend must reproduce it (bound 0).
class EmbedCase : public OpCase {
 public:
  EmbedCase(DType type, int64_t vocab, int64_t dim, int64_t tokens) : type_(type), vocab_(vocab), dim_(dim), tokens_(tokens) {
    op = "embed";
    shape = std::to_string(vocab) + "x" + std::to_string(dim) + " n=" + std::to_string(tokens);
    dtype = dtype_name(type);
    bytes = double((row_bytes(type, dim) + 4 * dim) * tokens);
  }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(vocab_ + dim_));
    rows_ = random_weights(rng, type_, vocab_, dim_);
    for (int64_t t = 0; t < tokens_; ++t) tokens_host_.push_back(int32_t((t * 37 + 5) % vocab_));
    table_ = data.matrix(type_, vocab_, dim_, rows_, false);
    tokens_dev_ = reinterpret_cast<int32_t*>(data.bytes(tokens_host_.data(), tokens_host_.size() * sizeof(int32_t)));
    out_ = data.zeros(size_t(tokens_ * dim_));
  }
  void run(Backend& b) override {
    StepIndex step;
    step.n_tokens = tokens_;
    step.tokens = tokens_dev_;
    b.embed(table_, step, out_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    const std::vector<float> all = dequantized(type_, rows_, vocab_, dim_);
    std::vector<float> want;
    for (int32_t token : tokens_host_) want.insert(want.end(), all.begin() + token * dim_, all.begin() + (token + 1) * dim_);
    return {normalised_error(data.read(out_, want.size()), want, magnitudes(want)), 0.0};
  }

 private:
  DType type_;
  int64_t vocab_, dim_, tokens_;
  std::vector<uint8_t> rows_;
  std::vector<int32_t> tokens_host_;
  WeightMatrix table_;
  int32_t* tokens_dev_ = nullptr;
  float* out_ = nullptr;
};

// The mean square over dim in f32 differs from the exact one by at most
// (dim/2 + 1)·u relative (pairwise or recursive sums of positive terms), the
// square root halves it, and the scaling adds three roundings.
class RmsNormCase : public OpCase {
 public:
  // weighted false: no weight (null), the row only scaled, as DeepSeek-V4 normalises its query heads and streams.
  RmsNormCase(int64_t n, int64_t dim, int64_t stride, bool weighted = true) : n_(n), dim_(dim), stride_(stride), weighted_(weighted) {
    op = "rms_norm";
    shape = std::to_string(n) + "x" + std::to_string(dim) + (stride != dim ? " strided" : "") + (weighted ? "" : " unweighted");
    dtype = "f32";
    flops = 4.0 * double(n * dim);
    bytes = 4.0 * double(2 * n * dim + dim);
  }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(n_ + dim_));
    x_ = random_floats(rng, n_ * stride_, 3.0f);
    weight_ = weighted_ ? random_floats(rng, dim_) : std::vector<float>(size_t(dim_), 1.0f);
    x_dev_ = data.floats(x_);
    weight_dev_ = weighted_ ? data.floats(weight_) : nullptr;
    out_ = data.zeros(size_t(n_ * stride_));
  }
  void run(Backend& b) override { b.rms_norm(x_dev_, stride_, weight_dev_, 1e-5f, n_, dim_, out_, stride_); }
  Outcome check(Backend& b, DeviceData& data) override {
    const std::vector<float> all = data.read(out_, size_t(n_ * stride_));
    std::vector<float> got, want;
    for (int64_t t = 0; t < n_; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < dim_; ++i) sum += double(x_[size_t(t * stride_ + i)]) * x_[size_t(t * stride_ + i)];
      const double scale = 1.0 / std::sqrt(sum / double(dim_) + 1e-5);
      for (int64_t i = 0; i < dim_; ++i) {
        got.push_back(all[size_t(t * stride_ + i)]);
        want.push_back(float(double(x_[size_t(t * stride_ + i)]) * scale * weight_[size_t(i)]));
      }
    }
    return {normalised_error(got, want, magnitudes(want)), (double(dim_) / 2.0 + 5.0) * k_u};
  }

 private:
  int64_t n_, dim_, stride_;
  bool weighted_;
  std::vector<float> x_, weight_;  // all ones where unweighted
  float *x_dev_ = nullptr, *weight_dev_ = nullptr, *out_ = nullptr;
};

// LayerNorm (the V3.2 indexer's keys): the mean and the squares of the
// differences summed in f64, then (x - mean)·scale·w + b in f32. Against the
// reference in double, an output carries the rounding of the mean and of
// x - mean (relative to |x| + |mean|), of the f32 squares (dim/2 u through
// the square root, as for RMSNorm) and of three products and a sum: S_j is
// (|x| + |mean|)·scale·|w| + |b|, the bound (dim/2 + 8)·u.
class LayerNormCase : public OpCase {
 public:
  LayerNormCase(int64_t n, int64_t dim) : n_(n), dim_(dim) {
    op = "layer_norm";
    shape = std::to_string(n) + "x" + std::to_string(dim);
    dtype = "f32";
    flops = 8.0 * double(n * dim);
    bytes = 4.0 * double(2 * n * dim + 2 * dim);
  }
  bool supported(const Backend& b) const override { return b.has_sparse_attention(); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(n_ * 7 + dim_));
    x_ = random_floats(rng, n_ * dim_, 3.0f);
    for (float& v : x_) v += 1.5f;  // a mean away from zero
    weight_ = random_floats(rng, dim_);
    bias_ = random_floats(rng, dim_);
    x_dev_ = data.floats(x_);
    weight_dev_ = data.floats(weight_);
    bias_dev_ = data.floats(bias_);
  }
  void run(Backend& b) override { b.layer_norm(x_dev_, weight_dev_, bias_dev_, 1e-6f, n_, dim_, x_dev_); }  // in place, as the model calls it
  Outcome check(Backend& b, DeviceData& data) override {
    const std::vector<float> got = data.read(x_dev_, size_t(n_ * dim_));
    std::vector<float> want;
    std::vector<double> s;
    for (int64_t t = 0; t < n_; ++t) {
      const float* x = x_.data() + t * dim_;
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < dim_; ++i) mean += x[i];
      mean /= double(dim_);
      for (int64_t i = 0; i < dim_; ++i) var += (x[i] - mean) * (x[i] - mean);
      const double scale = 1.0 / std::sqrt(var / double(dim_) + 1e-6);
      for (int64_t i = 0; i < dim_; ++i) {
        want.push_back(float((x[i] - mean) * scale * weight_[size_t(i)] + bias_[size_t(i)]));
        s.push_back((std::fabs(x[i]) + std::fabs(mean)) * scale * std::fabs(weight_[size_t(i)]) + std::fabs(bias_[size_t(i)]));
      }
    }
    return {normalised_error(got, want, s), (double(dim_) / 2.0 + 8.0) * k_u};
  }

 private:
  int64_t n_, dim_;
  std::vector<float> x_, weight_, bias_;
  float *x_dev_ = nullptr, *weight_dev_ = nullptr, *bias_dev_ = nullptr;
};

// An f32 op over rows x dim values.
class RowsCase : public OpCase {
 public:
  RowsCase(std::string name, int64_t rows, int64_t dim) : rows_(rows), dim_(dim) {
    op = std::move(name);
    shape = std::to_string(rows) + "x" + std::to_string(dim);
    dtype = "f32";
  }

 protected:
  int64_t rows_, dim_;
};

// add, add_bias, silu_mul: element by element. A sum of two floats is
// correctly rounded everywhere (bound 0); silu(g)·u takes exp (within 2 ulp
// in libm and CUDA's expf, and silu's relative sensitivity to it is at most
// 1), a sum, a division and a product: 6u with the reference's own rounding.
class ElementwiseCase : public RowsCase {
 public:
  ElementwiseCase(std::string name, int64_t rows, int64_t dim) : RowsCase(std::move(name), rows, dim) {
    flops = double(rows * dim) * (op == "silu_mul" ? 5.0 : 1.0);
    bytes = 12.0 * double(rows * dim);
  }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(rows_ * dim_));
    a_ = random_floats(rng, rows_ * dim_, 4.0f);
    b_ = random_floats(rng, op == "add_bias" ? dim_ : rows_ * dim_);
    a_dev_ = data.floats(a_);
    b_dev_ = data.floats(b_);
  }
  void run(Backend& b) override {
    if (op == "add") b.add(a_dev_, b_dev_, rows_ * dim_);
    if (op == "add_bias") b.add_bias(a_dev_, b_dev_, rows_, dim_);
    if (op == "silu_mul") b.silu_mul(a_dev_, b_dev_, rows_ * dim_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<float> want = a_;
    if (op == "add") add_inplace(want.data(), b_.data(), rows_ * dim_);
    if (op == "add_bias") add_bias(want.data(), b_.data(), rows_, dim_);
    if (op == "silu_mul") {
      for (size_t i = 0; i < want.size(); ++i) want[i] = float(double(a_[i]) / (1.0 + std::exp(-double(a_[i]))) * b_[i]);
    }
    return {normalised_error(data.read(a_dev_, want.size()), want, magnitudes(want)), op == "silu_mul" ? 6.0 * k_u : 0.0};
  }

 private:
  std::vector<float> a_, b_;
  float *a_dev_ = nullptr, *b_dev_ = nullptr;
};

// gather_rows and copy_heads move values: bound 0.
class MoveCase : public RowsCase {
 public:
  MoveCase(std::string name, int64_t rows, int64_t dim) : RowsCase(std::move(name), rows, dim) {
    bytes = 8.0 * double(rows * dim);
  }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(rows_ + dim_));
    src_ = random_floats(rng, rows_ * 2 * dim_);
    src_dev_ = data.floats(src_);
    dst_dev_ = data.zeros(size_t(rows_ * 2 * dim_));
    for (int64_t i = 0; i < rows_; ++i) picked_.push_back(int32_t((i * 5 + 3) % (2 * rows_)));
  }
  // copy_heads: 4 heads of dim/4 from rows of 2·dim (head stride dim/2) to packed rows of dim.
  void run(Backend& b) override {
    if (op == "gather_rows") b.gather_rows(src_dev_, dim_, picked_.data(), rows_, dst_dev_);
    if (op == "copy_heads") b.copy_heads(HeadRows{dst_dev_, 4, dim_ / 4, dim_, dim_ / 4}, HeadRows{src_dev_, 4, dim_ / 4, 2 * dim_, dim_ / 2}, rows_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<float> want(size_t(rows_ * dim_));
    for (int64_t i = 0; i < rows_; ++i) {
      for (int64_t d = 0; d < dim_; ++d) {
        want[size_t(i * dim_ + d)] = op == "gather_rows" ? src_[size_t(picked_[size_t(i)] * dim_ + d)]
                                                         : src_[size_t(i * 2 * dim_ + d / (dim_ / 4) * (dim_ / 2) + d % (dim_ / 4))];
      }
    }
    return {normalised_error(data.read(dst_dev_, want.size()), want, magnitudes(want)), 0.0};
  }

 private:
  std::vector<float> src_;
  std::vector<int32_t> picked_;
  float *src_dev_ = nullptr, *dst_dev_ = nullptr;
};

// The collectives a split model's forward calls, over the backend's memory
// (parallel/device_ranks.h: NCCL on CUDA, the host's elsewhere), in a job of
// one rank: the sum of one rank's rows, the gather of one part and the
// broadcast from rank 0 each leave the values as they were (bound 0), issued
// in order among the backend's ops. More ranks need more devices: the MPI
// tests (tests/reference/test_tensor_parallel.py) sum over two.
class CollectivesCase : public RowsCase {
 public:
  CollectivesCase(int64_t rows, int64_t dim) : RowsCase("collectives", rows, dim) {}
  void setup(Backend& b, DeviceData& data) override {
    auto joined = join_device_ranks(b, host_);
    if (!joined.ok()) {
      refused_ = joined.message();
      return;
    }
    device_ = joined.take();
    std::mt19937 rng(uint32_t(rows_ * dim_));
    x_ = random_floats(rng, rows_ * dim_);
    summed_ = data.floats(x_);
    broadcast_ = data.floats(x_);
    gathered_ = data.zeros(x_.size());
  }
  void run(Backend& b) override {
    if (!refused_.empty()) return;
    Collective& ranks = device_ ? *device_ : host_;
    const int64_t n = rows_ * dim_;
    b.add(summed_, summed_, n);  // issued before: the collectives must see its result
    ranks.all_reduce_sum(summed_, n);
    ranks.all_gather(summed_, n, gathered_);
    ranks.broadcast(broadcast_, size_t(n) * sizeof(float), 0);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    if (!refused_.empty()) {  // e.g. a CUDA build without NCCL, where tensor parallel is refused
      Outcome refused{INFINITY, 0.0};
      refused.note = refused_;
      return refused;
    }
    std::vector<float> doubled = x_;
    for (float& v : doubled) v += v;
    const size_t n = x_.size();
    const double e = std::max({normalised_error(data.read(summed_, n), doubled, magnitudes(doubled)),
                               normalised_error(data.read(gathered_, n), doubled, magnitudes(doubled)),
                               normalised_error(data.read(broadcast_, n), x_, magnitudes(x_))});
    return {e, 0.0};
  }

 private:
  OneRankCollective host_;
  std::unique_ptr<Collective> device_;  // null where the host's serve
  std::string refused_;                 // why the backend has none
  std::vector<float> x_;
  float *summed_ = nullptr, *gathered_ = nullptr, *broadcast_ = nullptr;
};

// Sequences of a step over shuffled pages: `lengths` tokens each, the last
// `new_tokens` of each in the step; their window pages (KvStream::windowed)
// shuffled otherwise.
struct PagedStep {
  int64_t page_tokens = 4;
  std::vector<std::vector<int32_t>> pages, window_pages;
  std::vector<BlockTableView> tables, window_tables;
  std::vector<int32_t> tokens, positions, seq_of_token;
  int64_t n_pages = 0, n_ctx = 0;

  PagedStep(const std::vector<int64_t>& lengths, int64_t new_tokens, int64_t page_size = 4) : page_tokens(page_size) {
    for (int64_t len : lengths) n_pages += (len + page_tokens - 1) / page_tokens;
    std::vector<int32_t> order(static_cast<size_t>(n_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(5));
    size_t next = 0;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int64_t len = lengths[s];
      pages.emplace_back(order.begin() + int64_t(next), order.begin() + int64_t(next) + (len + page_tokens - 1) / page_tokens);
      next += pages.back().size();
      for (int64_t p = std::max<int64_t>(0, len - new_tokens); p < len; ++p) {
        tokens.push_back(0);
        positions.push_back(int32_t(p));
        seq_of_token.push_back(int32_t(s));
      }
      n_ctx = std::max(n_ctx, len);
    }
    std::shuffle(order.begin(), order.end(), std::mt19937(6));
    next = 0;
    for (const auto& p : pages) {
      window_pages.emplace_back(order.begin() + int64_t(next), order.begin() + int64_t(next + p.size()));
      next += p.size();
    }
    for (const auto& p : pages) tables.push_back(BlockTableView{p.data(), int32_t(p.size())});
    for (const auto& p : window_pages) window_tables.push_back(BlockTableView{p.data(), int32_t(p.size())});
  }
  StepIndex host() const {
    return StepIndex{int64_t(tokens.size()), n_ctx, tokens.data(), positions.data(), seq_of_token.data(), tables.data(), int64_t(tables.size()),
                     window_tables.data()};
  }
  // Every slot of every sequence's pages, as (position, sequence) pairs: what a case writes the whole cache with.
  struct Slots {
    std::vector<int32_t> positions, seqs;
  };
  Slots every_slot() const {
    Slots slots;
    for (size_t s = 0; s < pages.size(); ++s) {
      for (int64_t p = 0; p < int64_t(pages[s].size()) * page_tokens; ++p) {
        slots.positions.push_back(int32_t(p));
        slots.seqs.push_back(int32_t(s));
      }
    }
    return slots;
  }
};

// A layer's KV memory in the backend and a host copy for the reference.
struct PagedKv {
  KvLayerView device, host;
  std::vector<uint8_t> host_k, host_v;
  size_t k_bytes = 0, v_bytes = 0;
  PagedKv(DeviceData& data, DType dtype, int64_t n_pages, int64_t page_tokens, int64_t n_kv_heads, int64_t head_dim, bool with_v) {
    const int64_t kv_dim = n_kv_heads * head_dim;
    k_bytes = size_t(n_pages * page_tokens * row_bytes(dtype, kv_dim));
    v_bytes = with_v ? k_bytes : 0;
    host_k.assign(k_bytes, 0);
    host_v.assign(v_bytes, 0);
    host = KvLayerView{dtype, host_k.data(), with_v ? host_v.data() : nullptr, page_tokens, kv_dim, n_kv_heads};
    device = host;
    device.k = data.bytes(host_k.data(), k_bytes);
    device.v = with_v ? data.bytes(host_v.data(), v_bytes) : nullptr;
  }
};

// The rounding unit of a KV type, relative to a row's largest magnitude: a
// value one f32 ulp away on either backend may round to the neighbouring code.
double kv_unit(DType dtype) { return dtype == DType::f32 ? 8.0 * k_u : dtype == DType::f16 ? 0x1p-11 : 1.0 / 127.0; }

// RoPE of q and k (contiguous heads or the strided RoPE part of MLA rows;
// with Llama 3's frequency factors dividing each pair's angle, or not),
// then the rows stored at each token's slot. Rotations: cos/sin (1 ulp each),
// the YaRN magnitude, two products and a sum: 8u of the pair's magnitude. The
// stored rows may differ by one code of the KV type (kv_unit).
class RopeKvWriteCase : public OpCase {
 public:
  RopeKvWriteCase(RopeLayout layout, RopeScaling scaling, DType kv_dtype, int64_t n_head, int64_t n_head_kv, int64_t head_dim, bool mla,
                  bool freq_factors = false)
      : kv_dtype_(kv_dtype), n_head_(n_head), n_head_kv_(n_head_kv), head_dim_(head_dim), mla_(mla), freq_factors_(freq_factors),
        step_({21, 9, 3}, 7) {
    rope_.layout = layout;
    rope_.n_rot = int(mla ? head_dim : head_dim - 16);  // partial rotation off MLA
    rope_.freq_base = 10000.0f;
    rope_.scaling = scaling;
    rope_.scaling_factor = 4.0f;
    rope_.n_ctx_orig = 8;
    op = "rope_kv_write";
    shape = std::to_string(n_head) + "/" + std::to_string(n_head_kv) + "x" + std::to_string(head_dim) + (mla ? " mla" : "") +
            (layout == RopeLayout::neox ? " neox" : " normal") +
            (scaling == RopeScaling::yarn ? " yarn" : scaling == RopeScaling::dynamic_ntk ? " ntk" : "") + (freq_factors ? " freq_factors" : "");
    dtype = std::string("kv ") + dtype_name(kv_dtype);
  }
  // MLA: q rows of n_head × (16 + head_dim) with the RoPE part after 16; the
  // cache row: a 32-wide latent then the shared RoPE key (head_dim).
  int64_t q_head() const { return mla_ ? 16 + head_dim_ : head_dim_; }
  int64_t q_offset() const { return mla_ ? 16 : 0; }
  int64_t kv_row() const { return mla_ ? 32 + head_dim_ : n_head_kv_ * head_dim_; }
  int64_t k_offset() const { return mla_ ? 32 : 0; }
  int64_t n() const { return int64_t(step_.tokens.size()); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(n_head_ + head_dim_));
    q_ = random_floats(rng, n() * n_head_ * q_head());
    k_ = random_floats(rng, n() * kv_row());
    v_ = random_floats(rng, n() * kv_row());
    q_dev_ = data.floats(q_);
    k_dev_ = data.floats(k_);
    v_dev_ = mla_ ? nullptr : data.floats(v_);
    kv_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, step_.page_tokens, mla_ ? 1 : n_head_kv_, mla_ ? kv_row() : head_dim_, !mla_);
    step_dev_ = b.upload_step(step_.host());
    if (freq_factors_) {  // Llama 3's range: 1 for the fastest pairs up to its factor (8) for the slowest
      factors_.resize(size_t(rope_.n_rot / 2));
      for (size_t i = 0; i < factors_.size(); ++i) factors_[i] = 1.0f + 7.0f * float(i) / float(factors_.size() - 1);
      factors_dev_ = data.floats(factors_);
    }
  }
  // The parameters with the factors where `factors` points (the device's copy, or the host's).
  RopeParams with_factors(const float* factors) const {
    RopeParams r = rope_;
    r.freq_factors = freq_factors_ ? factors : nullptr;
    return r;
  }
  HeadRows q_rows(float* q) const { return HeadRows{q + q_offset(), n_head_, head_dim_, n_head_ * q_head(), q_head()}; }
  HeadRows k_rows(float* k) const {
    return mla_ ? HeadRows{k + k_offset(), 1, head_dim_, kv_row(), head_dim_} : HeadRows{k, n_head_kv_, head_dim_, kv_row(), head_dim_};
  }
  void run(Backend& b) override {
    b.rope_kv_write(with_factors(factors_dev_), step_dev_, q_rows(q_dev_), k_rows(k_dev_), kv_->device, k_dev_, v_dev_);
  }
  // The reference rotation: each head gathered, rotated by the contiguous kernel, put back.
  void rotate(const HeadRows& rows) const {
    std::vector<float> head(static_cast<size_t>(head_dim_));
    for (int64_t t = 0; t < n(); ++t) {
      for (int64_t h = 0; h < rows.n_heads; ++h) {
        float* at = rows.data + t * rows.token_stride + h * rows.head_stride;
        std::copy_n(at, head_dim_, head.data());
        ds::rope(with_factors(factors_.data()), head.data(), 1, 1, head_dim_, step_.positions.data() + t, step_.n_ctx);
        std::copy_n(head.data(), head_dim_, at);
      }
    }
  }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<float> q_want = q_, k_want = k_;
    rotate(q_rows(q_want.data()));
    rotate(k_rows(k_want.data()));
    // A rotated pair's magnitude, for every element of it (others: |x|).
    const auto pair_magnitudes = [&](const std::vector<float>& before, const HeadRows& rows) {
      std::vector<double> s = magnitudes(before);
      const int half = rope_.n_rot / 2;
      for (int64_t t = 0; t < n(); ++t) {
        for (int64_t h = 0; h < rows.n_heads; ++h) {
          const size_t at = size_t((rows.data - before.data()) + t * rows.token_stride + h * rows.head_stride);
          for (int i = 0; i < half; ++i) {
            const size_t a = at + size_t(rope_.layout == RopeLayout::normal ? 2 * i : i);
            const size_t c = at + size_t(rope_.layout == RopeLayout::normal ? 2 * i + 1 : i + half);
            s[a] = s[c] = (std::fabs(before[a]) + std::fabs(before[c])) * 2.0;  // the YaRN magnitude is at most ~1.2
          }
        }
      }
      return s;
    };
    std::vector<float> q_copy = q_, k_copy = k_;
    const double e_q = normalised_error(data.read(q_dev_, q_.size()), q_want, pair_magnitudes(q_copy, q_rows(q_copy.data())));
    const double e_k = normalised_error(data.read(k_dev_, k_.size()), k_want, pair_magnitudes(k_copy, k_rows(k_copy.data())));
    // The stored rows against the reference store of the reference rotation.
    kv_write(kv_->host, k_want.data(), mla_ ? nullptr : v_.data(), n(), step_.positions.data(), step_.seq_of_token.data(), step_.tables.data());
    const int64_t dim = kv_->host.kv_dim, n_slots = step_.n_pages * step_.page_tokens;
    double e_kv = 0.0;
    for (int which = 0; which < (mla_ ? 1 : 2); ++which) {
      std::vector<uint8_t> got_bytes(which ? kv_->v_bytes : kv_->k_bytes);
      b.download(got_bytes.data(), which ? kv_->device.v : kv_->device.k, got_bytes.size());
      const std::vector<float> got = dequantized(kv_dtype_, got_bytes, n_slots, dim);
      const std::vector<float> want = dequantized(kv_dtype_, which ? kv_->host_v : kv_->host_k, n_slots, dim);
      std::vector<double> s(want.size());
      for (int64_t r = 0; r < n_slots; ++r) {
        double row_max = 0.0;
        for (int64_t i = 0; i < dim; ++i) row_max = std::max(row_max, std::fabs(double(want[size_t(r * dim + i)])));
        for (int64_t i = 0; i < dim; ++i) s[size_t(r * dim + i)] = row_max;
      }
      e_kv = std::max(e_kv, normalised_error(got, want, s));
    }
    // Three outputs with bounds of their own: e in units of each one's bound.
    return {std::max({e_q / (8.0 * k_u), e_k / (8.0 * k_u), e_kv / kv_unit(kv_dtype_)}), 1.0};
  }

 private:
  RopeParams rope_;
  DType kv_dtype_;
  int64_t n_head_, n_head_kv_, head_dim_;
  bool mla_, freq_factors_;
  std::vector<float> factors_;
  float* factors_dev_ = nullptr;
  PagedStep step_;
  StepIndex step_dev_;
  std::vector<float> q_, k_, v_;
  float *q_dev_ = nullptr, *k_dev_ = nullptr, *v_dev_ = nullptr;
  std::unique_ptr<PagedKv> kv_;
};

// Attention over the pages of a step's sequences. A score q·k·scale carries at
// most δs = D·u·scale·|q|₁·max|k| of f32 error; the softmax weights then
// differ by at most 2δs + 2L·u relative (L positions), and the output, a
// convex combination of values, by that times max|v| plus its own L·u sum.
// With top_k, sparse_attention over up to top_k positions of each token's
// context drawn at random (V3.2's choice is the indexer's; any will do here).
class PagedAttentionCase : public OpCase {
 public:
  PagedAttentionCase(DType kv_dtype, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t v_dim, std::vector<int64_t> lengths,
                     int64_t new_tokens, int64_t top_k = 0)
      : kv_dtype_(kv_dtype), step_(lengths, new_tokens), top_k_(top_k) {
    shape_ = AttentionShape{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(float(head_dim)), v_dim};
    op = top_k ? "sparse_attention" : "paged_attention";
    shape = std::to_string(n_head) + "/" + std::to_string(n_head_kv) + "x" + std::to_string(head_dim) + (v_dim ? " latent" : "") +
            " ctx " + std::to_string(step_.n_ctx) + " n=" + std::to_string(step_.tokens.size()) +
            (top_k ? " top_k " + std::to_string(top_k) : "");
    dtype = std::string("kv ") + dtype_name(kv_dtype);
    int64_t pairs = 0;
    for (int32_t p : step_.positions) pairs += top_k ? std::min<int64_t>(p + 1, top_k) : p + 1;
    flops = 2.0 * double(pairs * n_head * (head_dim + shape_.value_dim()));
    bytes = double(pairs * n_head_kv * (row_bytes(kv_dtype, head_dim) + (v_dim ? 0 : row_bytes(kv_dtype, head_dim))));
  }
  int64_t n() const { return int64_t(step_.tokens.size()); }
  bool supported(const Backend& b) const override { return top_k_ == 0 || b.has_sparse_attention(); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(shape_.n_head * 3 + step_.n_ctx));
    const bool latent = shape_.v_dim > 0;
    const int64_t kv_dim = shape_.n_head_kv * shape_.head_dim, n_slots = step_.n_pages * step_.page_tokens;
    kv_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, step_.page_tokens, shape_.n_head_kv, shape_.head_dim, !latent);
    // Every slot written through the reference store, the bytes then copied to the backend.
    const PagedStep::Slots slots = step_.every_slot();
    const std::vector<float> k = random_floats(rng, n_slots * kv_dim, 2.0f), v = random_floats(rng, n_slots * kv_dim);
    kv_write(kv_->host, k.data(), latent ? nullptr : v.data(), int64_t(slots.positions.size()), slots.positions.data(), slots.seqs.data(), step_.tables.data());
    b.upload(kv_->device.k, kv_->host_k.data(), kv_->k_bytes);
    if (!latent) b.upload(kv_->device.v, kv_->host_v.data(), kv_->v_bytes);
    max_k_ = 0.0;
    for (float x : dequantized(kv_dtype_, kv_->host_k, n_slots, kv_dim)) max_k_ = std::max(max_k_, std::fabs(double(x)));
    max_v_ = latent ? max_k_ : 0.0;
    if (!latent) {
      for (float x : dequantized(kv_dtype_, kv_->host_v, n_slots, kv_dim)) max_v_ = std::max(max_v_, std::fabs(double(x)));
    }
    q_ = random_floats(rng, n() * shape_.n_head * shape_.head_dim);
    q_dev_ = data.floats(q_);
    out_ = data.zeros(size_t(n() * shape_.n_head * shape_.value_dim()));
    step_dev_ = b.upload_step(step_.host());
    if (top_k_) {
      selected_.assign(size_t(n() * top_k_), 0);
      for (int64_t t = 0; t < n(); ++t) {
        std::vector<int32_t> all(size_t(step_.positions[size_t(t)] + 1));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(std::min(all.size(), size_t(top_k_)));
        std::sort(all.begin(), all.end());
        std::copy(all.begin(), all.end(), selected_.begin() + t * top_k_);
        n_selected_.push_back(int32_t(all.size()));
      }
      selected_dev_ = reinterpret_cast<int32_t*>(data.bytes(selected_.data(), selected_.size() * sizeof(int32_t)));
      n_selected_dev_ = reinterpret_cast<int32_t*>(data.bytes(n_selected_.data(), n_selected_.size() * sizeof(int32_t)));
    }
  }
  void run(Backend& b) override {
    if (top_k_) return b.sparse_attention(kv_->device, shape_, step_dev_, q_dev_, selected_dev_, n_selected_dev_, top_k_, out_);
    b.paged_attention(kv_->device, shape_, step_dev_, q_dev_, out_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<float> want(size_t(n() * shape_.n_head * shape_.value_dim()));
    if (top_k_) {
      sparse_attention_reference(kv_->host, shape_, q_.data(), n(), step_.seq_of_token.data(), step_.tables.data(), selected_.data(),
                                 n_selected_.data(), top_k_, want.data());
    } else {
      paged_attention_reference(kv_->host, shape_, q_.data(), n(), step_.positions.data(), step_.seq_of_token.data(), step_.tables.data(),
                                want.data());
    }
    double q_l1 = 0.0;
    for (int64_t r = 0; r < n() * shape_.n_head; ++r) {
      double sum = 0.0;
      for (int64_t i = 0; i < shape_.head_dim; ++i) sum += std::fabs(q_[size_t(r * shape_.head_dim + i)]) * 1.001;  // the query's rounding to the KV type
      q_l1 = std::max(q_l1, sum);
    }
    const double ds = double(shape_.head_dim) * k_u * shape_.scale * q_l1 * max_k_;
    const double bound = 2.0 * ds + 3.0 * double(step_.n_ctx + shape_.head_dim) * k_u;
    return {normalised_error(data.read(out_, want.size()), want, std::vector<double>(want.size(), max_v_)), bound};
  }

 private:
  DType kv_dtype_;
  AttentionShape shape_;
  PagedStep step_;
  StepIndex step_dev_;
  std::unique_ptr<PagedKv> kv_;
  std::vector<float> q_;
  double max_k_ = 0.0, max_v_ = 0.0;
  float *q_dev_ = nullptr, *out_ = nullptr;
  int64_t top_k_;
  std::vector<int32_t> selected_, n_selected_;
  int32_t *selected_dev_ = nullptr, *n_selected_dev_ = nullptr;
};

// The V3.2 indexer's choice: each token's top_k positions by score =
// sum_h w_h·weight_scale·relu(q_h·k), ties to the lower position, ascending.
// Scores differ between backends by their f32 rounding, so where two scores
// lie within it either may be chosen: against scores in double, δ_p =
// Σ_h |w_h·weight_scale|·((D + 2)·u·Σ_i |q_hi·k_pi| + 2u·|q_h·k_p|) + H·u·Σ_h |w_h·weight_scale·relu(q_h·k_p)|
// bounds position p's error, and e is how far the highest-scoring position
// left out outranks the lowest chosen, in units of the largest δ_a + δ_b. The
// choice among exact ties is checked exactly: with every key equal, each
// backend's scores are equal too and the first top_k positions must win.
class IndexerSelectCase : public OpCase {
 public:
  IndexerSelectCase(DType kv_dtype, int64_t n_heads, int64_t dim, std::vector<int64_t> lengths, int64_t new_tokens, int64_t top_k,
                    bool equal_keys = false)
      : kv_dtype_(kv_dtype), n_heads_(n_heads), dim_(dim), top_k_(top_k), equal_keys_(equal_keys), step_(lengths, new_tokens) {
    op = "indexer_select";
    shape = std::to_string(n_heads) + "x" + std::to_string(dim) + " ctx " + std::to_string(step_.n_ctx) + " n=" +
            std::to_string(step_.tokens.size()) + " top_k " + std::to_string(top_k) + (equal_keys ? " ties" : "");
    dtype = std::string("kv ") + dtype_name(kv_dtype);
    int64_t pairs = 0;
    for (int32_t p : step_.positions) pairs += p + 1;
    flops = 2.0 * double(pairs * n_heads * dim);
    bytes = double(pairs * row_bytes(kv_dtype, dim));
  }
  int64_t n() const { return int64_t(step_.tokens.size()); }
  bool supported(const Backend& b) const override { return b.has_sparse_attention(); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(n_heads_ * 11 + step_.n_ctx + top_k_));
    const int64_t n_slots = step_.n_pages * step_.page_tokens;
    kv_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, step_.page_tokens, 1, dim_, false);
    const PagedStep::Slots slots = step_.every_slot();
    std::vector<float> k = random_floats(rng, n_slots * dim_);
    if (equal_keys_) {
      for (int64_t r = 1; r < n_slots; ++r) std::copy_n(k.begin(), dim_, k.begin() + r * dim_);
    }
    kv_write(kv_->host, k.data(), nullptr, int64_t(slots.positions.size()), slots.positions.data(), slots.seqs.data(), step_.tables.data());
    b.upload(kv_->device.k, kv_->host_k.data(), kv_->k_bytes);
    q_ = random_floats(rng, n() * n_heads_ * dim_);
    weights_ = random_floats(rng, n() * n_heads_);  // of either sign, as the projection gives them
    q_dev_ = data.floats(q_);
    weights_dev_ = data.floats(weights_);
    selected_dev_ = reinterpret_cast<int32_t*>(data.bytes(nullptr, size_t(n() * top_k_) * sizeof(int32_t)));
    n_selected_dev_ = reinterpret_cast<int32_t*>(data.bytes(nullptr, size_t(n()) * sizeof(int32_t)));
    step_dev_ = b.upload_step(step_.host());
  }
  float weight_scale() const { return 1.0f / std::sqrt(float(dim_ * n_heads_)); }
  void run(Backend& b) override {
    b.indexer_select(kv_->device, step_dev_, q_dev_, n_heads_, weights_dev_, weight_scale(), top_k_, selected_dev_, n_selected_dev_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<int32_t> selected(size_t(n() * top_k_)), n_selected(static_cast<size_t>(n()));
    b.download(selected.data(), selected_dev_, selected.size() * sizeof(int32_t));
    b.download(n_selected.data(), n_selected_dev_, n_selected.size() * sizeof(int32_t));
    Outcome outcome{0.0, 1.0};
    const int64_t row = row_bytes(kv_dtype_, dim_);
    for (int64_t t = 0; t < n(); ++t) {
      const int64_t n_ctx = int64_t(step_.positions[size_t(t)]) + 1, k = std::min(top_k_, n_ctx);
      const int32_t* chosen = selected.data() + t * top_k_;
      if (n_selected[size_t(t)] != k) {
        outcome.note = "token " + std::to_string(t) + " chose " + std::to_string(n_selected[size_t(t)]) + " positions, not " + std::to_string(k);
        return outcome;
      }
      std::vector<bool> taken(size_t(n_ctx), false);
      for (int64_t i = 0; i < k; ++i) {
        if (chosen[i] < 0 || chosen[i] >= n_ctx || (i > 0 && chosen[i] <= chosen[i - 1])) {
          outcome.note = "token " + std::to_string(t) + "'s positions are not ascending within its context";
          return outcome;
        }
        taken[size_t(chosen[i])] = true;
      }
      if (equal_keys_) {
        for (int64_t i = 0; i < k; ++i) {
          if (chosen[i] != i) outcome.note = "equal scores: token " + std::to_string(t) + " did not take the first positions";
        }
        continue;
      }
      // Scores in double over the queries rounded to the cache's type, and each one's bound.
      std::vector<float> queries(size_t(n_heads_ * dim_)), key(static_cast<size_t>(dim_));
      std::vector<uint8_t> typed(size_t(row_bytes(kv_dtype_, n_heads_ * dim_)));
      quantize_row(kv_dtype_, q_.data() + t * n_heads_ * dim_, typed.data(), n_heads_ * dim_);
      dequantize_row(kv_dtype_, typed.data(), queries.data(), n_heads_ * dim_);
      double lowest_chosen = INFINITY, highest_left = -INFINITY, widest = 0.0;
      for (int64_t p = 0; p < n_ctx; ++p) {
        const BlockTableView& table = step_.tables[size_t(step_.seq_of_token[size_t(t)])];
        const int64_t slot = int64_t(table.pages[p / step_.page_tokens]) * step_.page_tokens + p % step_.page_tokens;
        dequantize_row(kv_dtype_, kv_->host_k.data() + slot * row, key.data(), dim_);
        double score = 0.0, bound = 0.0, terms = 0.0;
        for (int64_t h = 0; h < n_heads_; ++h) {
          double dot = 0.0, magnitude = 0.0;
          for (int64_t i = 0; i < dim_; ++i) {
            dot += double(queries[size_t(h * dim_ + i)]) * key[size_t(i)];
            magnitude += std::fabs(double(queries[size_t(h * dim_ + i)]) * key[size_t(i)]);
          }
          const double w = double(weights_[size_t(t * n_heads_ + h)]) * weight_scale();
          score += w * std::max(0.0, dot);
          terms += std::fabs(w * std::max(0.0, dot));
          bound += std::fabs(w) * (double(dim_ + 2) * k_u * magnitude + 2.0 * k_u * std::fabs(dot));
        }
        bound += double(n_heads_) * k_u * terms;
        widest = std::max(widest, bound);
        if (taken[size_t(p)]) lowest_chosen = std::min(lowest_chosen, score);
        else highest_left = std::max(highest_left, score);
      }
      if (k < n_ctx && widest > 0.0) outcome.error = std::max(outcome.error, (highest_left - lowest_chosen) / (2.0 * widest));
    }
    return outcome;
  }

 private:
  DType kv_dtype_;
  int64_t n_heads_, dim_, top_k_;
  bool equal_keys_;
  PagedStep step_;
  StepIndex step_dev_;
  std::unique_ptr<PagedKv> kv_;
  std::vector<float> q_, weights_;
  float *q_dev_ = nullptr, *weights_dev_ = nullptr;
  int32_t *selected_dev_ = nullptr, *n_selected_dev_ = nullptr;
};

// Multi-head latent attention in expanded form: each sequence's cached
// latents up-projected to every head's keys ([nope | the cached RoPE part])
// and values, then attention with an online softmax. The reference projects
// the same operands (latents as the weight type's activations) in double,
// then attends in double. Keys and values carry γ_L of their products'
// magnitudes (L = kv_lora): δk and δv. A score then carries
// scale·|q|₁·(δk + D·u·max|k|) = δs, and the output, normalised by max|v|,
// the paged-attention bound of δs plus δv / max|v|.
class MlaExpandedAttentionCase : public OpCase {
 public:
  MlaExpandedAttentionCase(DType weight_type, DType kv_dtype, int64_t n_head, int64_t kv_lora, int64_t nope, int64_t rope,
                           int64_t v_dim, std::vector<int64_t> lengths, int64_t new_tokens)
      : weight_type_(weight_type), kv_dtype_(kv_dtype), kv_lora_(kv_lora), nope_(nope), rope_(rope), step_(lengths, new_tokens) {
    shape_ = AttentionShape{n_head, n_head, nope + rope, 1.0f / std::sqrt(float(nope + rope)), v_dim};
    op = "mla_expanded_attention";
    shape = std::to_string(n_head) + "x(" + std::to_string(nope) + "+" + std::to_string(rope) + ")/" + std::to_string(kv_lora) +
            " ctx " + std::to_string(step_.n_ctx) + " n=" + std::to_string(step_.tokens.size());
    dtype = std::string(dtype_name(weight_type)) + " kv " + dtype_name(kv_dtype);
    int64_t pairs = 0, projected = 0;
    for (int32_t p : step_.positions) pairs += p + 1;
    for (const Sequence& s : sequences()) projected += step_.positions[size_t(s.t0 + s.n - 1)] + 1;
    flops = 2.0 * double(projected * n_head * (nope + v_dim) * kv_lora + pairs * n_head * (nope + rope + v_dim));
    bytes = double(projected * row_bytes(kv_dtype, kv_lora + rope) + n_head * (nope + v_dim) * row_bytes(weight_type, kv_lora));
  }
  bool supported(const Backend& b) const override { return b.expands_mla() && b.supports(weight_type_); }
  int64_t n() const { return int64_t(step_.tokens.size()); }
  int64_t q_stride() const { return shape_.n_head * shape_.head_dim + 8; }  // padded, as the model's q rows are
  int64_t out_stride() const { return shape_.n_head * shape_.v_dim + 4; }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(shape_.n_head * 5 + kv_lora_ + step_.n_ctx));
    const int64_t row = kv_lora_ + rope_, n_slots = step_.n_pages * step_.page_tokens;
    kv_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, step_.page_tokens, 1, row, false);
    const PagedStep::Slots slots = step_.every_slot();
    const std::vector<float> latents = random_floats(rng, n_slots * row);
    kv_write(kv_->host, latents.data(), nullptr, int64_t(slots.positions.size()), slots.positions.data(), slots.seqs.data(), step_.tables.data());
    b.upload(kv_->device.k, kv_->host_k.data(), kv_->k_bytes);
    for (int64_t h = 0; h < shape_.n_head; ++h) {
      k_rows_.push_back(random_weights(rng, weight_type_, nope_, kv_lora_));
      k_up_.push_back(data.matrix(weight_type_, nope_, kv_lora_, k_rows_.back(), true));
      v_rows_.push_back(random_weights(rng, weight_type_, shape_.v_dim, kv_lora_));
      v_up_.push_back(data.matrix(weight_type_, shape_.v_dim, kv_lora_, v_rows_.back(), true));
    }
    q_ = random_floats(rng, n() * q_stride());
    q_dev_ = data.floats(q_);
    out_ = data.zeros(size_t(n() * out_stride()));
    step_dev_ = b.upload_step(step_.host());
  }
  void run(Backend& b) override {
    for (const Sequence& s : sequences()) {
      b.mla_expanded_attention(kv_->device, shape_, step_dev_, s.t0, s.n, q_dev_, q_stride(), k_up_.data(), v_up_.data(), out_,
                               out_stride());
    }
  }
  Outcome check(Backend& b, DeviceData& data) override {
    const int64_t head_dim = shape_.head_dim, v_dim = shape_.v_dim, n_head = shape_.n_head, row = kv_lora_ + rope_;
    const std::vector<float> all = data.read(out_, size_t(n() * out_stride()));
    std::vector<float> got, want;
    double max_k = 0.0, max_v = 0.0, dk = 0.0, dv = 0.0, q_l1 = 0.0;
    const double gamma = double(kv_lora_ + 1) * k_u;
    for (const Sequence& s : sequences()) {
      const int64_t n_keys = step_.positions[size_t(s.t0 + s.n - 1)] + 1;
      std::vector<float> latents(size_t(n_keys * row)), keys(size_t(n_head * n_keys * head_dim)), values(size_t(n_head * n_keys * v_dim));
      kv_read(kv_->host, kv_->host.k, step_.tables[size_t(step_.seq_of_token[size_t(s.t0)])], 0, 0, n_keys, latents.data());
      std::vector<float> x(size_t(n_keys * kv_lora_));
      for (int64_t p = 0; p < n_keys; ++p) std::copy_n(latents.data() + p * row, kv_lora_, x.data() + p * kv_lora_);
      const std::vector<float> xa = as_activations(weight_type_, x, kv_lora_);
      // out [n_head][n_keys][width]: the up-projection of each head's rows, beside `tail` copied from each latent's RoPE part.
      const auto project = [&](const std::vector<uint8_t>* w_rows, int64_t rows, int64_t width, bool tail, std::vector<float>& out) {
        double largest = 0.0, error = 0.0;
        for (int64_t h = 0; h < n_head; ++h) {
          const std::vector<float> w = dequantized(weight_type_, w_rows[h], rows, kv_lora_);
          for (int64_t p = 0; p < n_keys; ++p) {
            float* o = out.data() + (h * n_keys + p) * width;
            for (int64_t r = 0; r < rows; ++r) {
              double sum = 0.0, magnitude = 0.0;
              for (int64_t i = 0; i < kv_lora_; ++i) {
                const double product = double(w[size_t(r * kv_lora_ + i)]) * xa[size_t(p * kv_lora_ + i)];
                sum += product, magnitude += std::fabs(product);
              }
              o[r] = float(sum);
              error = std::max(error, gamma * magnitude);
            }
            if (tail) std::copy_n(latents.data() + p * row + kv_lora_, rope_, o + rows);
            for (int64_t i = 0; i < width; ++i) largest = std::max(largest, std::fabs(double(o[i])));
          }
        }
        return std::pair{largest, error};
      };
      const auto [k_largest, k_error] = project(k_rows_.data(), nope_, head_dim, true, keys);
      const auto [v_largest, v_error] = project(v_rows_.data(), v_dim, v_dim, false, values);
      max_k = std::max(max_k, k_largest), dk = std::max(dk, k_error), max_v = std::max(max_v, v_largest), dv = std::max(dv, v_error);
      std::vector<float> expected(size_t(s.n * n_head * v_dim));
      dense_attention_reference(shape_, q_.data() + s.t0 * q_stride(), q_stride(), step_.positions.data() + s.t0, s.n, keys.data(),
                                values.data(), n_keys, expected.data(), n_head * v_dim);
      for (int64_t t = 0; t < s.n; ++t) {
        for (int64_t i = 0; i < n_head * v_dim; ++i) {
          got.push_back(all[size_t((s.t0 + t) * out_stride() + i)]);
          want.push_back(expected[size_t(t * n_head * v_dim + i)]);
        }
        for (int64_t h = 0; h < n_head; ++h) {
          double l1 = 0.0;
          for (int64_t i = 0; i < head_dim; ++i) l1 += std::fabs(q_[size_t((s.t0 + t) * q_stride() + h * head_dim + i)]);
          q_l1 = std::max(q_l1, l1);
        }
      }
    }
    const double ds = shape_.scale * q_l1 * (dk + double(head_dim) * k_u * max_k);
    const double bound = 2.0 * ds + 3.0 * double(step_.n_ctx + head_dim) * k_u + dv / max_v;
    Outcome outcome{normalised_error(got, want, std::vector<double>(want.size(), max_v)), bound};
    // The padding after each token's heads stays as it was.
    for (int64_t t = 0; t < n(); ++t) {
      for (int64_t i = n_head * v_dim; i < out_stride(); ++i) {
        if (all[size_t(t * out_stride() + i)] != 0.0f) outcome.note = "wrote past a token's heads";
      }
    }
    return outcome;
  }

 private:
  // The step's tokens of one sequence: [t0, t0 + n).
  struct Sequence {
    int64_t t0, n;
  };
  std::vector<Sequence> sequences() const {
    std::vector<Sequence> out;
    for (int64_t t = 0; t < n(); ++t) {
      if (t == 0 || step_.seq_of_token[size_t(t)] != step_.seq_of_token[size_t(t - 1)]) out.push_back({t, 0});
      ++out.back().n;
    }
    return out;
  }

  DType weight_type_, kv_dtype_;
  int64_t kv_lora_, nope_, rope_;
  AttentionShape shape_;
  PagedStep step_;
  StepIndex step_dev_;
  std::unique_ptr<PagedKv> kv_;
  std::vector<std::vector<uint8_t>> k_rows_, v_rows_;
  std::vector<WeightMatrix> k_up_, v_up_;
  std::vector<float> q_;
  float *q_dev_ = nullptr, *out_ = nullptr;
};

// The routed experts of one MoE layer. The reference routes with
// moe_route and runs each (token, slot) through the reference matmuls. The
// bound is first order through the chain: gate and up carry γ_K of their
// products; silu(g)·u passes that on (|silu'| ≤ 1.1) with 2u of its own, and
// may round to the neighbouring code of the down projection's activation
// type; down adds γ_ff; the slots' sum k·u. Expert token counts must agree.
class MoeCase : public OpCase {
 public:
  // sqrt_softplus: DeepSeek-V4's routing, with its SwiGLU clamp (at 2, where
  // this case's hidden values often reach) and, when `hashed`, each token's
  // experts given (hash routing) instead of chosen.
  MoeCase(DType type, ExpertGating gating, int64_t n_group, int64_t n_tokens, bool hashed = false)
      : type_(type), n_(n_tokens), hashed_(hashed) {
    routing_.n_expert = 8;
    routing_.n_expert_used = 2;
    routing_.gating = gating;
    routing_.normalize_weights = gating != ExpertGating::softmax;
    routing_.weights_scale = gating == ExpertGating::sigmoid ? 2.5f : gating == ExpertGating::sqrt_softplus ? 1.5f : 1.0f;
    routing_.swiglu_limit = gating == ExpertGating::sqrt_softplus ? 2.0f : 0.0f;
    routing_.n_group = n_group;
    routing_.n_group_used = n_group > 1 ? 2 : 1;
    op = "moe_experts";
    shape = "8 experts top-2" + std::string(n_group > 1 ? " 4 groups" : "") + " " + expert_gating_name(gating) +
            (routing_.swiglu_limit > 0.0f ? " clamp" : "") + (hashed ? " hashed" : "") + " " + std::to_string(k_embd) + "/" +
            std::to_string(k_ff) + " n=" + std::to_string(n_tokens);
    dtype = dtype_name(type);
    flops = 6.0 * double(n_tokens * routing_.n_expert_used * k_embd * k_ff);
    bytes = 3.0 * double(routing_.n_expert * k_ff * row_bytes(type, k_embd));
  }
  static constexpr int64_t k_embd = 256, k_ff = 256;  // whole K-type blocks
  bool supported(const Backend& b) const override {
    return b.supports(type_) && (routing_.gating != ExpertGating::sqrt_softplus || b.has_compressed_attention());
  }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(n_ * 13 + routing_.n_group));
    for (int64_t e = 0; e < routing_.n_expert; ++e) {
      for (auto [rows, cols] : {std::pair{k_ff, k_embd}, std::pair{k_ff, k_embd}, std::pair{k_embd, k_ff}}) {
        host_rows_.push_back(random_weights(rng, type_, rows, cols));
        matrices_.push_back(data.matrix(type_, rows, cols, host_rows_.back(), true));
      }
    }
    for (int64_t e = 0; e < routing_.n_expert; ++e) {
      gate_.push_back(matrices_[size_t(3 * e)]);
      up_.push_back(matrices_[size_t(3 * e + 1)]);
      down_.push_back(matrices_[size_t(3 * e + 2)]);
    }
    logits_ = random_floats(rng, n_ * routing_.n_expert);
    bias_ = random_floats(rng, routing_.n_expert, 0.1f);
    h_ = random_floats(rng, n_ * k_embd);
    logits_dev_ = data.floats(logits_);
    bias_dev_ = routing_.n_group > 1 || routing_.gating == ExpertGating::sqrt_softplus ? data.floats(bias_) : nullptr;
    h_dev_ = data.floats(h_);
    if (hashed_) {
      for (int64_t t = 0; t < n_; ++t) forced_.insert(forced_.end(), {int32_t(t % 8), int32_t((t * 3 + 1) % 8 == t % 8 ? (t + 1) % 8 : (t * 3 + 1) % 8)});
      forced_dev_ = reinterpret_cast<int32_t*>(data.bytes(forced_.data(), forced_.size() * sizeof(int32_t)));
    }
    out_ = data.zeros(size_t(n_ * k_embd));
  }
  void run(Backend& b) override {
    counts_.assign(size_t(routing_.n_expert), 0);
    ExpertRouting routing = routing_;
    routing.forced_experts = forced_dev_;
    b.moe_experts(routing, logits_dev_, bias_dev_, ExpertWeights{gate_.data(), up_.data(), down_.data()}, h_dev_, n_, out_, counts_.data());
  }
  Outcome check(Backend& b, DeviceData& data) override {
    const int64_t k = routing_.n_expert_used;
    const DType act = activation_type_for(type_);
    const double act_unit = act == DType::f32 ? 0.0 : act == DType::f16 ? 0x1p-11 : act == DType::bf16 ? 0x1p-8 : 1.0 / 127.0;
    std::vector<float> want(size_t(n_ * k_embd), 0.0f);
    std::vector<double> s(want.size(), 0.0);
    std::vector<int64_t> counts(size_t(routing_.n_expert), 0);
    const std::vector<float> h_act = as_activations(type_, h_, k_embd);
    for (int64_t t = 0; t < n_; ++t) {
      std::vector<int32_t> experts(static_cast<size_t>(k));
      std::vector<float> weights(static_cast<size_t>(k));
      moe_route(routing_, logits_.data() + t * routing_.n_expert, bias_dev_ ? bias_.data() : nullptr,
                hashed_ ? forced_.data() + t * k : nullptr, experts.data(), weights.data());
      for (int64_t slot = 0; slot < k; ++slot) {
        const int64_t e = experts[size_t(slot)];
        ++counts[size_t(e)];
        const auto& gate_rows = host_rows_[size_t(3 * e)], &up_rows = host_rows_[size_t(3 * e + 1)], &down_rows = host_rows_[size_t(3 * e + 2)];
        std::vector<float> g(static_cast<size_t>(k_ff)), u(static_cast<size_t>(k_ff)), a(static_cast<size_t>(k_ff)), d(static_cast<size_t>(k_embd));
        matmul_reference(WeightMatrix{type_, k_ff, k_embd, gate_rows.data()}, h_.data() + t * k_embd, 1, g.data());
        matmul_reference(WeightMatrix{type_, k_ff, k_embd, up_rows.data()}, h_.data() + t * k_embd, 1, u.data());
        const std::vector<float> h_row(h_act.begin() + t * k_embd, h_act.begin() + (t + 1) * k_embd);
        const auto sg = product_magnitudes(dequantized(type_, gate_rows, k_ff, k_embd), h_row, k_ff, k_embd, 1);
        const auto su = product_magnitudes(dequantized(type_, up_rows, k_ff, k_embd), h_row, k_ff, k_embd, 1);
        std::vector<double> da(static_cast<size_t>(k_ff));
        const double limit = routing_.swiglu_limit;
        if (limit > 0.0) {  // clamping moves no value further from another: the bounds below still hold
          for (int64_t i = 0; i < k_ff; ++i) {
            g[size_t(i)] = float(std::min(double(g[size_t(i)]), limit));
            u[size_t(i)] = float(std::clamp(double(u[size_t(i)]), -limit, limit));
          }
        }
        for (int64_t i = 0; i < k_ff; ++i) {
          const double silu = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)])));
          a[size_t(i)] = float(silu * u[size_t(i)]);
          const double gamma = matmul_bound(type_, k_embd);
          da[size_t(i)] = 1.1 * (std::fabs(u[size_t(i)]) * gamma * sg[size_t(i)] + std::fabs(silu) * gamma * su[size_t(i)]) +
                          2.0 * k_u * std::fabs(a[size_t(i)]);
        }
        // The down projection's activation rounding: one code step of its block.
        const std::vector<float> a_act = as_activations(type_, a, k_ff);
        const int64_t block = dtype_traits(act).block_elements;
        for (int64_t b0 = 0; b0 < k_ff; b0 += block) {
          double block_max = 0.0;
          for (int64_t i = b0; i < b0 + block; ++i) block_max = std::max(block_max, std::fabs(double(a[size_t(i)])) + da[size_t(i)]);
          for (int64_t i = b0; i < b0 + block; ++i) da[size_t(i)] += act_unit * (block == 1 ? std::fabs(a[size_t(i)]) : block_max);
        }
        matmul_reference(WeightMatrix{type_, k_embd, k_ff, down_rows.data()}, a.data(), 1, d.data());
        const std::vector<float> down = dequantized(type_, down_rows, k_embd, k_ff);
        for (int64_t j = 0; j < k_embd; ++j) {
          double products = 0.0, propagated = 0.0;
          for (int64_t i = 0; i < k_ff; ++i) {
            products += std::fabs(double(down[size_t(j * k_ff + i)]) * a_act[size_t(i)]);
            propagated += std::fabs(double(down[size_t(j * k_ff + i)])) * da[size_t(i)];
          }
          want[size_t(t * k_embd + j)] += d[size_t(j)] * weights[size_t(slot)];
          s[size_t(t * k_embd + j)] += std::fabs(weights[size_t(slot)]) *
                                       (matmul_bound(type_, k_ff) * products + propagated + double(k + 2) * k_u * std::fabs(d[size_t(j)]));
        }
      }
    }
    // s holds each output's absolute error bound: e is measured against it, with bound 1.
    Outcome outcome{normalised_error(data.read(out_, want.size()), want, s), 1.0};
    if (counts != counts_) outcome.note = "expert token counts differ from the reference routing";
    return outcome;
  }

 private:
  DType type_;
  int64_t n_;
  bool hashed_;
  ExpertRouting routing_;
  std::vector<int32_t> forced_;
  int32_t* forced_dev_ = nullptr;
  std::vector<std::vector<uint8_t>> host_rows_;
  std::vector<WeightMatrix> matrices_, gate_, up_, down_;
  std::vector<float> logits_, bias_, h_;
  std::vector<int64_t> counts_;
  float *logits_dev_ = nullptr, *bias_dev_ = nullptr, *h_dev_ = nullptr, *out_ = nullptr;
};

// ---- DeepSeek-V4's ops ------------------------------------------------------------------------

// The hyper-connections around a sublayer and at the head, against the same
// formulas in double. First-order rounding: each of Sinkhorn's 2·iterations
// normalisations (a sum of four, an epsilon, a division) moves the mix by at
// most 6u relative, the logits' affine map and exp or sigmoid by 2u·|z| with
// |z| < 12 here, and each output is a sum of at most five products (6u of S_j,
// the sum of their magnitudes): (12·iterations + 40)·u.
class HyperConnectionCase : public OpCase {
 public:
  HyperConnectionCase(int64_t n, int64_t dim) : n_(n), dim_(dim) {
    op = "hyper_connection";
    shape = std::to_string(n) + "x4x" + std::to_string(dim);
    dtype = "f32";
  }
  bool supported(const Backend& b) const override { return b.has_compressed_attention(); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(n_ * 31 + dim_));
    streams_ = random_floats(rng, n_ * 4 * dim_, 2.0f);
    logits_ = random_floats(rng, n_ * 24, 2.0f);
    head_logits_ = random_floats(rng, n_ * 4, 2.0f);
    block_ = random_floats(rng, n_ * dim_);
    base_ = random_floats(rng, 24, 3.0f);
    scale_ = {0.7f, 1.3f, 1.1f};
    head_base_ = random_floats(rng, 4, 3.0f);
    head_scale_ = {0.9f};
    streams_dev_ = data.floats(streams_);
    logits_dev_ = data.floats(logits_);
    head_logits_dev_ = data.floats(head_logits_);
    block_dev_ = data.floats(block_);
    params_ = HyperConnectionParams{4, dim_, data.floats(scale_), data.floats(base_), 20, 1e-6f};
    head_params_ = HyperConnectionParams{4, dim_, data.floats(head_scale_), data.floats(head_base_), 20, 1e-6f};
    in_ = data.zeros(size_t(n_ * dim_));
    post_ = data.zeros(size_t(n_ * 4));
    mix_ = data.zeros(size_t(n_ * 16));
    head_out_ = data.zeros(size_t(n_ * dim_));
  }
  void run(Backend& b) override {
    b.hyper_connection_pre(params_, streams_dev_, logits_dev_, n_, in_, post_, mix_);
    b.hyper_connection_post(params_, streams_dev_, block_dev_, post_, mix_, n_);
    b.hyper_connection_head(head_params_, streams_dev_, head_logits_dev_, n_, head_out_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
    std::vector<float> want_in, want_streams, want_head;
    std::vector<double> s_in, s_streams, s_head;
    for (int64_t t = 0; t < n_; ++t) {
      const float* mu = logits_.data() + t * 24;
      const float* x = streams_.data() + t * 4 * dim_;
      double pre[4], post[4], m[16];
      for (int i = 0; i < 4; ++i) {
        pre[i] = sigmoid(double(scale_[0]) * mu[i] + base_[size_t(i)]) + 1e-6;
        post[i] = 2.0 * sigmoid(double(scale_[1]) * mu[4 + i] + base_[size_t(4 + i)]);
      }
      for (int j = 0; j < 4; ++j) {  // softmax over destinations i of each source j
        double max = -INFINITY, sum = 0.0;
        for (int i = 0; i < 4; ++i) max = std::max(max, m[j * 4 + i] = double(scale_[2]) * mu[8 + j * 4 + i] + base_[size_t(8 + j * 4 + i)]);
        for (int i = 0; i < 4; ++i) sum += m[j * 4 + i] = std::exp(m[j * 4 + i] - max);
        for (int i = 0; i < 4; ++i) m[j * 4 + i] = m[j * 4 + i] / sum + 1e-6;
      }
      for (int iteration = 0; iteration < 20; ++iteration) {
        if (iteration > 0) {
          for (int j = 0; j < 4; ++j) {
            double sum = 0.0;
            for (int i = 0; i < 4; ++i) sum += m[j * 4 + i];
            for (int i = 0; i < 4; ++i) m[j * 4 + i] /= sum + 1e-6;
          }
        }
        for (int i = 0; i < 4; ++i) {
          double sum = 0.0;
          for (int j = 0; j < 4; ++j) sum += m[j * 4 + i];
          for (int j = 0; j < 4; ++j) m[j * 4 + i] /= sum + 1e-6;
        }
      }
      std::vector<double> after(size_t(4 * dim_));
      for (int64_t e = 0; e < dim_; ++e) {
        double in = 0.0, s = 0.0;
        for (int i = 0; i < 4; ++i) {
          in += pre[i] * x[i * dim_ + e];
          s += std::fabs(pre[i] * x[i * dim_ + e]);
        }
        want_in.push_back(float(in));
        s_in.push_back(s);
        for (int i = 0; i < 4; ++i) {
          double y = post[i] * block_[size_t(t * dim_ + e)], sy = std::fabs(y);
          for (int j = 0; j < 4; ++j) {
            y += m[j * 4 + i] * x[j * dim_ + e];
            sy += std::fabs(m[j * 4 + i] * x[j * dim_ + e]);
          }
          after[size_t(i * dim_ + e)] = y;
        }
      }
      for (int i = 0; i < 4; ++i) {
        for (int64_t e = 0; e < dim_; ++e) {
          want_streams.push_back(float(after[size_t(i * dim_ + e)]));
          double sy = std::fabs(post[i] * block_[size_t(t * dim_ + e)]);
          for (int j = 0; j < 4; ++j) sy += std::fabs(m[j * 4 + i] * x[j * dim_ + e]);
          s_streams.push_back(sy);
        }
      }
      for (int64_t e = 0; e < dim_; ++e) {
        double h = 0.0, s = 0.0;
        for (int i = 0; i < 4; ++i) {
          const double w = sigmoid(double(head_scale_[0]) * head_logits_[size_t(t * 4 + i)] + head_base_[size_t(i)]) + 1e-6;
          h += w * after[size_t(i * dim_ + e)];
          s += std::fabs(w * after[size_t(i * dim_ + e)]);
        }
        want_head.push_back(float(h));
        s_head.push_back(s);
      }
    }
    const double e = std::max({normalised_error(data.read(in_, want_in.size()), want_in, s_in),
                               normalised_error(data.read(streams_dev_, want_streams.size()), want_streams, s_streams),
                               normalised_error(data.read(head_out_, want_head.size()), want_head, s_head)});
    return {e, (12.0 * 20 + 40.0) * k_u};
  }

 private:
  int64_t n_, dim_;
  std::vector<float> streams_, logits_, head_logits_, block_, base_, scale_, head_base_, head_scale_;
  float *streams_dev_ = nullptr, *logits_dev_ = nullptr, *head_logits_dev_ = nullptr, *block_dev_ = nullptr;
  float *in_ = nullptr, *post_ = nullptr, *mix_ = nullptr, *head_out_ = nullptr;
  HyperConnectionParams params_, head_params_;
};

// rope_rows: the last n_rot elements of each head rotated at a position, and
// turned back at its negation; against the reference rotation, 8u of a
// pair's magnitude (RopeKvWriteCase), and the round trip within 16u.
class RopeRowsCase : public OpCase {
 public:
  RopeRowsCase(int64_t n_head, int64_t head_dim, int n_rot) : n_head_(n_head), head_dim_(head_dim) {
    rope_.n_rot = n_rot;
    rope_.freq_base = 160000.0f;
    rope_.scaling = RopeScaling::yarn;
    rope_.scaling_factor = 16.0f;
    rope_.n_ctx_orig = 64;
    rope_.yarn_attn_factor = 1.0f / (1.0f + 0.1f * std::log(16.0f));  // V4 cancels YaRN's magnitude
    op = "rope_rows";
    shape = std::to_string(n_head) + "x" + std::to_string(head_dim) + " tail " + std::to_string(n_rot) + " yarn";
    dtype = "f32";
  }
  bool supported(const Backend& b) const override { return b.has_compressed_attention(); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(n_head_ * 5 + head_dim_));
    x_ = random_floats(rng, k_n * n_head_ * head_dim_);
    for (int64_t t = 0; t < k_n; ++t) positions_.push_back(int32_t(t * 37 % 300));
    for (int32_t p : positions_) inverse_.push_back(-p);
    x_dev_ = data.floats(x_);
    rotated_dev_ = data.floats(x_);
    positions_dev_ = reinterpret_cast<int32_t*>(data.bytes(positions_.data(), positions_.size() * sizeof(int32_t)));
    inverse_dev_ = reinterpret_cast<int32_t*>(data.bytes(inverse_.data(), inverse_.size() * sizeof(int32_t)));
  }
  HeadRows tail(float* x) const { return HeadRows{x + head_dim_ - rope_.n_rot, n_head_, rope_.n_rot, n_head_ * head_dim_, head_dim_}; }
  void run(Backend& b) override {
    b.rope_rows(rope_, positions_dev_, 300, tail(rotated_dev_), k_n);
    b.rope_rows(rope_, positions_dev_, 300, tail(x_dev_), k_n);
    b.rope_rows(rope_, inverse_dev_, 300, tail(x_dev_), k_n);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<float> want = x_;
    rope_strided(rope_, want.data() + head_dim_ - rope_.n_rot, k_n, n_head_, rope_.n_rot, n_head_ * head_dim_, head_dim_,
                 positions_.data(), 300);
    std::vector<double> s(x_.size());
    for (size_t i = 0; i < x_.size(); ++i) {  // a pair's magnitude for its two elements
      const size_t in_head = i % size_t(head_dim_), pair = (in_head - (in_head % 2));
      const size_t at = i - in_head + pair;
      s[i] = std::fabs(x_[at]) + std::fabs(x_[at + 1]);
    }
    const double e_rotated = normalised_error(data.read(rotated_dev_, x_.size()), want, s) / 8.0;
    const double e_back = normalised_error(data.read(x_dev_, x_.size()), x_, s) / 16.0;
    return {std::max(e_rotated, e_back), k_u};
  }

 private:
  static constexpr int64_t k_n = 9;
  int64_t n_head_, head_dim_;
  RopeParams rope_;
  std::vector<float> x_;
  std::vector<int32_t> positions_, inverse_;
  float *x_dev_ = nullptr, *rotated_dev_ = nullptr;
  int32_t *positions_dev_ = nullptr, *inverse_dev_ = nullptr;
};

// Where row b of a stream of one row per `ratio` tokens lives (pages of
// page_tokens tokens): in the page of the block's last token, written here
// apart from the kernels' own function.
size_t compressed_row_offset(const KvLayerView& rows, const BlockTableView& table, int64_t ratio, int64_t page_tokens, int64_t b) {
  const int64_t last = b * ratio + ratio - 1;
  const int64_t rows_per_page = std::max<int64_t>(1, page_tokens / ratio);
  return size_t((table.pages[last / page_tokens] * rows_per_page + last % page_tokens / ratio) * row_bytes(rows.dtype, rows.kv_dim));
}

// kv_compress over two sequences, whole in one step or in chunks of
// `chunk` tokens, each chunk's step followed by `rejected` more tokens of
// other values (a draft that verification rejects, rewritten by the next
// step); the projections in rings (KvStream::ring_horizon) where the pages are
// larger than the rows read back plus those. The reference pools the stored
// (rounded) state of the tokens kept in double, normalises and rotates it: the
// pooled value is a convex combination (exp 2u, a sum of up to 2·ratio
// weights), the RMSNorm sums dim squares (dim/2 u), the rotation 8u:
// (4·ratio + dim/2 + 16)·u of the row's largest magnitude, plus one code of
// the KV type where stored.
class KvCompressCase : public OpCase {
 public:
  KvCompressCase(DType kv_dtype, int64_t ratio, int64_t dim, std::vector<int64_t> lengths, int64_t page_tokens = 4, int64_t chunk = 0,
                 int64_t rejected = 0)
      : kv_dtype_(kv_dtype), lengths_(lengths), step_(lengths, *std::max_element(lengths.begin(), lengths.end()), page_tokens),
        chunk_(chunk > 0 ? chunk : step_.n_ctx), rejected_(rejected) {
    c_.ratio = ratio;
    c_.dim = dim;
    c_.overlap = ratio == 4;
    c_.eps = 1e-6f;
    c_.rope.n_rot = 16;
    c_.rope.freq_base = 160000.0f;
    // A ring of the rows a step reads back (of its block, ratio 4: and the one before) and the rejected ones, where a page has more slots.
    const int64_t ring = (c_.overlap ? 2 * ratio : ratio) - 1 + rejected;
    state_rows_ = ring < page_tokens ? ring : page_tokens;
    op = "kv_compress";
    shape = "ratio " + std::to_string(ratio) + " dim " + std::to_string(dim) + " ctx " + std::to_string(step_.n_ctx) + " pages of " +
            std::to_string(page_tokens) + (chunk > 0 ? " chunks of " + std::to_string(chunk) : std::string()) +
            (rejected > 0 ? " +" + std::to_string(rejected) + " rejected" : std::string()) +
            (state_rows_ < page_tokens ? " ring " + std::to_string(state_rows_) : std::string());
    dtype = std::string("kv ") + dtype_name(kv_dtype);
  }
  bool supported(const Backend& b) const override { return b.has_compressed_attention(); }
  int64_t n() const { return int64_t(step_.tokens.size()); }
  int64_t rows_per_page() const { return std::max<int64_t>(1, step_.page_tokens / c_.ratio); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(c_.ratio * 11 + c_.dim));
    const int64_t w = c_.width();
    kv_ = random_floats(rng, n() * w);
    score_ = random_floats(rng, n() * w, 3.0f);
    ape_ = random_floats(rng, c_.ratio * w);
    norm_ = random_floats(rng, c_.dim);
    for (float& x : norm_) x += 1.0f;
    c_.ape = data.floats(ape_);
    c_.norm = data.floats(norm_);
    state_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, state_rows_, 1, 2 * w, false);
    rows_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, rows_per_page(), 1, c_.dim, false);
    // The steps: each sequence's next chunk, then the rejected tokens after it (where its pages reach).
    std::vector<int64_t> first_token(lengths_.size(), 0);  // of each sequence in kv_'s order (step_'s tokens)
    for (size_t s = 1; s < lengths_.size(); ++s) first_token[s] = first_token[s - 1] + lengths_[s - 1];
    for (int64_t begin = 0; begin < step_.n_ctx; begin += chunk_) {
      Step& step = steps_.emplace_back();
      std::vector<float> kv, score;
      for (size_t s = 0; s < lengths_.size(); ++s) {
        const int64_t end = std::min(begin + chunk_, lengths_[s]);
        for (int64_t p = begin; p < std::min(end + rejected_, lengths_[s]); ++p) {
          step.positions.push_back(int32_t(p));
          step.seq_of_token.push_back(int32_t(s));
          const bool kept = p < end;
          const std::vector<float> other = random_floats(rng, 2 * w, 3.0f);
          for (int64_t i = 0; i < w; ++i) {
            kv.push_back(kept ? kv_[size_t((first_token[s] + p) * w + i)] : other[size_t(i)]);
            score.push_back(kept ? score_[size_t((first_token[s] + p) * w + i)] : other[size_t(w + i)]);
          }
        }
      }
      step.tokens.assign(step.positions.size(), 0);
      step.kv = data.floats(kv);
      step.score = data.floats(score);
    }
  }
  void run(Backend& b) override {
    for (const Step& step : steps_) {
      // Each step's index uploaded before its call, as the engine does: an upload is valid until the next (device/backend.h).
      StepIndex host = step_.host();
      host.n_tokens = int64_t(step.positions.size());
      host.tokens = step.tokens.data();
      host.positions = step.positions.data();
      host.seq_of_token = step.seq_of_token.data();
      b.kv_compress(c_, b.upload_step(host), step_.page_tokens, step.kv, step.score, state_->device, rows_->device);
    }
  }
  Outcome check(Backend& b, DeviceData& data) override {
    const int64_t w = c_.width(), r = c_.ratio, dim = c_.dim;
    // The state as stored: [kv | score + ape] rounded to the KV type.
    std::vector<std::vector<std::vector<float>>> state(step_.pages.size());
    for (int64_t t = 0; t < n(); ++t) {
      std::vector<float> row(size_t(2 * w)), bytes_row;
      for (int64_t i = 0; i < w; ++i) {
        row[size_t(i)] = kv_[size_t(t * w + i)];
        row[size_t(w + i)] = score_[size_t(t * w + i)] + ape_[size_t(step_.positions[size_t(t)] % r * w + i)];
      }
      std::vector<uint8_t> q(size_t(row_bytes(kv_dtype_, 2 * w)));
      quantize_row(kv_dtype_, row.data(), q.data(), 2 * w);
      dequantize_row(kv_dtype_, q.data(), row.data(), 2 * w);
      auto& seq = state[size_t(step_.seq_of_token[size_t(t)])];
      seq.resize(size_t(step_.positions[size_t(t)] + 1));
      seq[size_t(step_.positions[size_t(t)])] = row;
    }
    std::vector<uint8_t> got_bytes(rows_->k_bytes);
    b.download(got_bytes.data(), rows_->device.k, got_bytes.size());
    double e = 0.0;
    for (size_t s = 0; s < state.size(); ++s) {
      const auto& seq = state[s];
      for (int64_t block = 0; block < int64_t(seq.size()) / r; ++block) {
        std::vector<double> pooled(static_cast<size_t>(dim));
        for (int64_t ch = 0; ch < dim; ++ch) {
          std::vector<std::pair<double, double>> entries;  // (score, value)
          if (c_.overlap && block > 0) {
            for (int64_t j = (block - 1) * r; j < block * r; ++j) entries.push_back({seq[size_t(j)][size_t(w + ch)], seq[size_t(j)][size_t(ch)]});
          }
          const int64_t half = c_.overlap ? dim : 0;
          for (int64_t j = block * r; j < block * r + r; ++j) {
            entries.push_back({seq[size_t(j)][size_t(w + half + ch)], seq[size_t(j)][size_t(half + ch)]});
          }
          double max = -INFINITY, sum = 0.0, acc = 0.0;
          for (auto [score, value] : entries) max = std::max(max, score);
          for (auto [score, value] : entries) {
            sum += std::exp(score - max);
            acc += std::exp(score - max) * value;
          }
          pooled[size_t(ch)] = acc / sum;
        }
        double squares = 0.0;
        for (double x : pooled) squares += x * x;
        const double scale = 1.0 / std::sqrt(squares / double(dim) + 1e-6);
        std::vector<float> want(static_cast<size_t>(dim));
        for (int64_t ch = 0; ch < dim; ++ch) want[size_t(ch)] = float(pooled[size_t(ch)] * scale * norm_[size_t(ch)]);
        const int32_t position = int32_t(block * r);
        rope_strided(c_.rope, want.data() + dim - c_.rope.n_rot, 1, 1, c_.rope.n_rot, dim, dim, &position, position + 1);
        std::vector<float> got(static_cast<size_t>(dim));
        dequantize_row(kv_dtype_, got_bytes.data() + compressed_row_offset(rows_->host, step_.tables[s], r, step_.page_tokens, block), got.data(), dim);
        double row_max = 0.0;
        for (float x : want) row_max = std::max(row_max, std::fabs(double(x)));
        e = std::max(e, normalised_error(got, want, std::vector<double>(want.size(), row_max)));
      }
    }
    return {e, (4.0 * double(r) + double(dim) / 2.0 + 16.0) * k_u + (kv_dtype_ == DType::f32 ? 0.0 : kv_unit(kv_dtype_))};
  }

 private:
  struct Step {
    std::vector<int32_t> tokens, positions, seq_of_token;
    float *kv = nullptr, *score = nullptr;
  };
  DType kv_dtype_;
  std::vector<int64_t> lengths_;
  PagedStep step_;  // the pages, and every token of the sequences in one step (kv_'s order)
  int64_t chunk_, rejected_;
  int64_t state_rows_ = 0;  // the state's rows per page
  KvCompressorParams c_;
  std::vector<Step> steps_;
  std::vector<float> kv_, score_, ape_, norm_;
  std::unique_ptr<PagedKv> state_, rows_;
};

// compressed_attention: each token's window of raw rows plus compressed rows
// (ratio 128: every completed one; ratio 4: a random choice of up to top_k of
// them; 0: the window alone), one key head whose keys are the values, and
// each head's sink. The bound is PagedAttentionCase's, over the keys a token
// sees (the sink adds one term to the softmax's sum).
class CompressedAttentionCase : public OpCase {
 public:
  // The widths default to the tests' small ones; the perf cases give V4-Flash's (64 heads of 512, a window of 128, 512 chosen).
  CompressedAttentionCase(DType kv_dtype, int64_t ratio, std::vector<int64_t> lengths, int64_t new_tokens, int64_t n_head = 4,
                          int64_t head_dim = 64, int64_t window = 16, int64_t top_k = 8)
      : kv_dtype_(kv_dtype), step_(lengths, new_tokens) {
    a_ = CompressedAttentionParams{n_head, head_dim, window, ratio, ratio == 4 ? top_k : 0, 1.0f / std::sqrt(float(head_dim)), nullptr};
    op = "compressed_attention";
    shape = std::to_string(n_head) + "x" + std::to_string(head_dim) + " window " + std::to_string(window) + " ratio " + std::to_string(ratio) +
            (ratio == 4 ? " top_k " + std::to_string(top_k) : "") + " ctx " + std::to_string(step_.n_ctx) + " n=" + std::to_string(step_.tokens.size());
    dtype = std::string("kv ") + dtype_name(kv_dtype);
  }
  bool supported(const Backend& b) const override { return b.has_compressed_attention(); }
  int64_t n() const { return int64_t(step_.tokens.size()); }
  int64_t rows_per_page() const { return a_.ratio > 0 ? std::max<int64_t>(1, step_.page_tokens / a_.ratio) : 1; }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(a_.ratio * 7 + step_.n_ctx));
    const int64_t hd = a_.head_dim, n_slots = step_.n_pages * step_.page_tokens, n_rows = step_.n_pages * rows_per_page();
    window_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, step_.page_tokens, 1, hd, false);
    rows_ = std::make_unique<PagedKv>(data, kv_dtype_, step_.n_pages, rows_per_page(), 1, hd, false);
    for (auto [kv, count] : {std::pair{window_.get(), n_slots}, {rows_.get(), n_rows}}) {
      const std::vector<float> values = random_floats(rng, count * hd, 2.0f);
      for (int64_t r = 0; r < count; ++r) {
        quantize_row(kv_dtype_, values.data() + r * hd, kv->host_k.data() + r * row_bytes(kv_dtype_, hd), hd);
      }
      b.upload(kv->device.k, kv->host_k.data(), kv->k_bytes);
    }
    q_ = random_floats(rng, n() * a_.n_head * hd);
    sinks_ = random_floats(rng, a_.n_head, 2.0f);
    a_.sinks = data.floats(sinks_);
    q_dev_ = data.floats(q_);
    out_ = data.zeros(size_t(n() * a_.n_head * hd));
    step_dev_ = b.upload_step(step_.host());
    if (a_.ratio == 4) {
      selected_.assign(size_t(n() * a_.top_k), 0);
      for (int64_t t = 0; t < n(); ++t) {
        std::vector<int32_t> visible(size_t((step_.positions[size_t(t)] + 1) / 4));
        std::iota(visible.begin(), visible.end(), 0);
        std::shuffle(visible.begin(), visible.end(), rng);
        visible.resize(std::min(visible.size(), size_t(a_.top_k)));
        std::sort(visible.begin(), visible.end());
        std::copy(visible.begin(), visible.end(), selected_.begin() + t * a_.top_k);
        n_selected_.push_back(int32_t(visible.size()));
      }
      selected_dev_ = reinterpret_cast<int32_t*>(data.bytes(selected_.data(), selected_.size() * sizeof(int32_t)));
      n_selected_dev_ = reinterpret_cast<int32_t*>(data.bytes(n_selected_.data(), n_selected_.size() * sizeof(int32_t)));
    }
  }
  void run(Backend& b) override {
    b.compressed_attention(a_, step_dev_, step_.page_tokens, q_dev_, window_->device, rows_->device, selected_dev_, n_selected_dev_, out_);
  }
  Outcome check(Backend& b, DeviceData& data) override {
    const int64_t hd = a_.head_dim;
    std::vector<float> want;
    double max_k = 0.0, q_l1 = 0.0;
    int64_t longest = 0;
    for (int64_t t = 0; t < n(); ++t) {
      const BlockTableView& table = step_.tables[size_t(step_.seq_of_token[size_t(t)])];
      const BlockTableView& window_table = step_.window_tables[size_t(step_.seq_of_token[size_t(t)])];
      const int64_t p = step_.positions[size_t(t)];
      std::vector<std::vector<float>> keys;
      const auto read = [&](const PagedKv& kv, size_t offset) {
        std::vector<float> row(static_cast<size_t>(hd));
        dequantize_row(kv_dtype_, kv.host_k.data() + offset, row.data(), hd);
        for (float x : row) max_k = std::max(max_k, std::fabs(double(x)));
        keys.push_back(row);
      };
      for (int64_t j = std::max<int64_t>(0, p - a_.window + 1); j <= p; ++j) {
        read(*window_, size_t((window_table.pages[j / step_.page_tokens] * step_.page_tokens + j % step_.page_tokens) * row_bytes(kv_dtype_, hd)));
      }
      if (a_.ratio > 0) {
        const int64_t n_rows = a_.ratio == 4 ? n_selected_[size_t(t)] : (p + 1) / a_.ratio;
        for (int64_t i = 0; i < n_rows; ++i) {
          const int64_t block = a_.ratio == 4 ? selected_[size_t(t * a_.top_k + i)] : i;
          read(*rows_, compressed_row_offset(rows_->host, table, a_.ratio, step_.page_tokens, block));
        }
      }
      longest = std::max(longest, int64_t(keys.size()));
      for (int64_t h = 0; h < a_.n_head; ++h) {
        std::vector<float> qh(static_cast<size_t>(hd));
        std::vector<uint8_t> q_bytes(size_t(row_bytes(kv_dtype_, hd)));  // the query rounded to the cache's type, as the op does
        quantize_row(kv_dtype_, q_.data() + (t * a_.n_head + h) * hd, q_bytes.data(), hd);
        dequantize_row(kv_dtype_, q_bytes.data(), qh.data(), hd);
        double l1 = 0.0;
        for (float x : qh) l1 += std::fabs(x);
        q_l1 = std::max(q_l1, l1);
        std::vector<double> scores;
        double max = sinks_[size_t(h)];
        for (const auto& k : keys) {
          double dot = 0.0;
          for (int64_t e = 0; e < hd; ++e) dot += double(qh[size_t(e)]) * k[size_t(e)];
          scores.push_back(dot * a_.scale);
          max = std::max(max, scores.back());
        }
        double sum = std::exp(sinks_[size_t(h)] - max);
        std::vector<double> o(static_cast<size_t>(hd), 0.0);
        for (size_t k = 0; k < keys.size(); ++k) {
          const double w = std::exp(scores[k] - max);
          sum += w;
          for (int64_t e = 0; e < hd; ++e) o[size_t(e)] += w * keys[k][size_t(e)];
        }
        for (double x : o) want.push_back(float(x / sum));
      }
    }
    const double ds = double(hd) * k_u * a_.scale * q_l1 * max_k;
    const double bound = 2.0 * ds + 3.0 * double(longest + 1 + hd) * k_u;
    return {normalised_error(data.read(out_, want.size()), want, std::vector<double>(want.size(), max_k)), bound};
  }

 private:
  DType kv_dtype_;
  PagedStep step_;
  CompressedAttentionParams a_;
  StepIndex step_dev_;
  std::unique_ptr<PagedKv> window_, rows_;
  std::vector<float> q_, sinks_;
  float *q_dev_ = nullptr, *out_ = nullptr;
  std::vector<int32_t> selected_, n_selected_;
  int32_t *selected_dev_ = nullptr, *n_selected_dev_ = nullptr;
};

// swiglu: silu_mul's element-wise bound (ElementwiseCase) after the clamp,
// which moves no value further from another.
class SwigluCase : public RowsCase {
 public:
  SwigluCase(int64_t rows, int64_t dim, float limit) : RowsCase("swiglu", rows, dim), limit_(limit) {}
  bool supported(const Backend& b) const override { return b.has_compressed_attention(); }
  void setup(Backend& b, DeviceData& data) override {
    std::mt19937 rng(uint32_t(rows_ * dim_ + 1));
    gate_ = random_floats(rng, rows_ * dim_, 4.0f);
    up_ = random_floats(rng, rows_ * dim_, 4.0f);
    gate_dev_ = data.floats(gate_);
    up_dev_ = data.floats(up_);
  }
  void run(Backend& b) override { b.swiglu(gate_dev_, up_dev_, rows_ * dim_, limit_); }
  Outcome check(Backend& b, DeviceData& data) override {
    std::vector<float> want(gate_.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const double g = limit_ > 0 ? std::min(double(gate_[i]), double(limit_)) : gate_[i];
      const double u = limit_ > 0 ? std::clamp(double(up_[i]), -double(limit_), double(limit_)) : up_[i];
      want[i] = float(g / (1.0 + std::exp(-g)) * u);
    }
    return {normalised_error(data.read(gate_dev_, want.size()), want, magnitudes(want)), 6.0 * k_u};
  }

 private:
  float limit_;
  std::vector<float> gate_, up_;
  float *gate_dev_ = nullptr, *up_dev_ = nullptr;
};

// DeepSeek-V4's cases: streams of a few tokens and of a prefill, the
// rotation of the heads' tails, both compressors (past several ratio-128
// blocks), the attention of each kind of layer, the clamped SwiGLU.
void add_deepseek4_cases(std::vector<std::unique_ptr<OpCase>>& cases) {
  const auto add = [&](OpCase* c) { cases.emplace_back(c); };
  for (int64_t n : {1, 7, 40}) add(new HyperConnectionCase(n, 64));
  add(new HyperConnectionCase(3, 4096));
  add(new RopeRowsCase(4, 64, 16));
  add(new RopeRowsCase(2, 512, 64));
  for (DType kv : {DType::f32, DType::f16}) {
    add(new KvCompressCase(kv, 4, 64, {37, 9}));
    add(new KvCompressCase(kv, 128, 64, {300, 130}));
    // Rings of 7 and of 7 + 3 rows in pages of 32, the chunks splitting blocks and pages; a step begins on a block's
    // last token, which reads the most rows back (chunks of 5 and 7 at 15 and 7, of 127 at 127).
    add(new KvCompressCase(kv, 4, 64, {77, 30}, 32, 5));
    add(new KvCompressCase(kv, 4, 64, {77, 30}, 32, 7, 3));
    add(new KvCompressCase(kv, 4, 64, {77, 30}, 32, 1, 3));
    add(new KvCompressCase(kv, 128, 64, {300, 130}, 16, 37, 2));
    add(new KvCompressCase(kv, 128, 64, {300, 130}, 256, 127, 2));
    add(new CompressedAttentionCase(kv, 0, {40, 9}, 5));
    add(new CompressedAttentionCase(kv, 4, {300, 45}, 7));
    add(new CompressedAttentionCase(kv, 128, {300, 140}, 3));
  }
  for (float limit : {0.0f, 1.5f}) {
    add(new SwigluCase(3, 100, limit));
    add(new SwigluCase(40, 2048, limit));
  }
}

const DType k_weight_types[] = {DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q5_0,
                                DType::q5_1, DType::q8_0, DType::q4_k, DType::q5_k, DType::q6_k, DType::mxfp4};

std::vector<std::unique_ptr<OpCase>> test_cases() {
  std::vector<std::unique_ptr<OpCase>> cases;
  const auto add = [&](OpCase* c) { cases.emplace_back(c); };
  for (DType type : k_weight_types) {
    const int64_t cols = dtype_traits(type).block_elements == 256 ? 512 : 96;
    for (int64_t tokens : {1, 5, 33}) {
      add(new MatmulCase(type, 48, cols, tokens, true));  // whole groups of 8 and of 16 rows: repacked where the backend does
      add(new MatmulCase(type, 48, cols, tokens, false));
      add(new MatmulCase(type, 19, cols, tokens, true));  // rows off the group size
    }
    add(new EmbedCase(type, 50, cols, 9));
  }
  for (int64_t tokens : {1, 5, 33}) {  // W8A8, where the backend multiplies it; rows off the vector width
    add(new MatmulCase(DType::i8, 48, 96, tokens, true));
    add(new MatmulCase(DType::i8, 48, 96, tokens, false));
    add(new MatmulCase(DType::i8, 19, 100, tokens, true));
  }
  for (DType type : {DType::q8_0, DType::q4_0, DType::mxfp4, DType::i8, DType::q4_k, DType::q5_k, DType::q6_k}) {
    // Runs of 32 rows and less (8-row groups: 3, 5 and 7 of them; Q8_0's and I8's 16-row ones: 1, 3 and 5); pairs of
    // token tiles, a tail.
    const int64_t group_rows = interleaved_group_rows(type);
    for (auto [groups, tokens] : {std::pair{3, 16}, {5, 33}, {7, 50}}) {
      const int64_t rows = group_rows == 16 ? (groups - 2) * 16 : groups * 8;
      add(new StepEqualsAloneCase("amx_tiles", type, rows, dtype_traits(type).block_elements == 256 ? 3 * 256 : 7 * 32, tokens));
    }
  }
  for (auto [rows, tokens] : {std::pair{16, 1}, {48, 16}, {64, 33}, {32, 50}}) {  // BF16: groups of 16 rows, every token count
    add(new StepEqualsAloneCase("amx_tiles", DType::bf16, rows, 7 * 32, tokens));
  }
  for (DType type : {DType::q8_0, DType::q4_0, DType::q5_0, DType::q4_1, DType::q5_1, DType::mxfp4, DType::i8, DType::q4_k, DType::q5_k,
                     DType::q6_k}) {
    // Pairs of 8-row groups and an odd one left; the fewest tokens, tiles of eight and a tail.
    for (auto [groups, tokens] : {std::pair{3, k_pair_min_tokens}, {5, 9}, {2, 17}}) {
      add(new StepEqualsAloneCase("pair_kernels", type, groups * 8, dtype_traits(type).block_elements == 256 ? 3 * 256 : 7 * 32, tokens));
    }
  }
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {
    for (int64_t tokens : {1, 9}) add(new MatmulBatchedCase(type, 4, 64, 64, tokens));
  }
  for (auto [n, dim, stride] : {std::tuple{1, 64, 64}, {5, 576, 576}, {3, 512, 576}, {7, 4096, 4096}}) add(new RmsNormCase(n, dim, stride));
  add(new RmsNormCase(6, 512, 512, false));
  for (const char* name : {"add", "add_bias", "silu_mul"}) {
    add(new ElementwiseCase(name, 3, 100));
    add(new ElementwiseCase(name, 40, 2048));  // past the CPU's threshold for threads
  }
  for (const char* name : {"gather_rows", "copy_heads"}) add(new MoveCase(name, 6, 64));
  add(new CollectivesCase(7, 4099));  // rows of an odd width
  for (DType kv : {DType::f32, DType::f16, DType::q8_0}) {
    add(new RopeKvWriteCase(RopeLayout::normal, RopeScaling::none, kv, 8, 2, 64, false));
    add(new RopeKvWriteCase(RopeLayout::neox, RopeScaling::yarn, kv, 4, 4, 32, false));
    add(new RopeKvWriteCase(RopeLayout::normal, RopeScaling::none, kv, 8, 2, 64, false, /*freq_factors=*/true));  // Llama 3's
    add(new PagedAttentionCase(kv, 8, 2, 64, 0, {21, 9, 3}, 5));
    add(new PagedAttentionCase(kv, 4, 4, 32, 0, {40}, 40));
    add(new PagedAttentionCase(kv, 6, 1, 64, 0, {1300, 600}, 2));  // contexts of several key ranges, one KV head
  }
  for (DType kv : {DType::f32, DType::f16}) {
    add(new RopeKvWriteCase(RopeLayout::neox, RopeScaling::dynamic_ntk, kv, 4, 1, 32, true));
    add(new PagedAttentionCase(kv, 4, 1, 96, 64, {17, 30}, 6));  // MLA: latent rows, values the first 64
  }
  // DeepSeek-V3.2: the indexer's keys, its choice (past a block's tile of positions, a token taking all, exact ties),
  // and MLA over the chosen positions.
  for (auto [n, dim] : {std::pair{1, 64}, {9, 128}}) add(new LayerNormCase(n, dim));
  for (DType kv : {DType::f32, DType::f16, DType::q8_0}) {
    add(new IndexerSelectCase(kv, 4, 64, {300, 20}, 3, 32));
    add(new IndexerSelectCase(kv, 8, 128, {1300}, 1, 64));
    add(new PagedAttentionCase(kv, 4, 1, 96, 64, {300, 40}, 5, 32));
  }
  add(new IndexerSelectCase(DType::f16, 4, 64, {200}, 2, 16, true));
  // Contexts of more than one up-projected block (256 positions), two sequences in one step.
  for (auto [weights, kv] : {std::pair{DType::f32, DType::f32}, {DType::f16, DType::f16}, {DType::bf16, DType::f16}}) {
    add(new MlaExpandedAttentionCase(weights, kv, 4, 64, 32, 16, 48, {300, 70}, 40));
  }
  for (DType type : {DType::f32, DType::f16, DType::q8_0, DType::q4_k, DType::mxfp4}) {
    for (int64_t n : {1, 3, 17}) {
      add(new MoeCase(type, ExpertGating::softmax, 1, n));
      add(new MoeCase(type, ExpertGating::sigmoid, 4, n));
      add(new MoeCase(type, ExpertGating::sqrt_softplus, 1, n));
      add(new MoeCase(type, ExpertGating::sqrt_softplus, 1, n, true));
    }
  }
  add_deepseek4_cases(cases);
  return cases;
}

// Decode- and prefill-sized shapes of the 1.1B benchmark models and
// DeepSeek-V2-Lite; operands larger than the caches (256 MiB of weights in
// turn, 32K-token contexts) where the op is bound by memory.
std::vector<std::unique_ptr<OpCase>> perf_cases() {
  std::vector<std::unique_ptr<OpCase>> cases;
  const auto add = [&](OpCase* c) { cases.emplace_back(c); };
  for (DType type : {DType::f16, DType::bf16, DType::q8_0, DType::i8, DType::q4_0, DType::q4_k, DType::q5_k, DType::q6_k, DType::mxfp4}) {
    const int copies = int((int64_t(256) << 20) / (2048 * row_bytes(type, 2048))) + 1;
    add(new MatmulCase(type, 2048, 2048, 1, true, copies));
    for (int64_t streams : {16, 32}) add(new MatmulCase(type, 2048, 2048, streams, true, copies));  // batched decode's steps
    add(new MatmulCase(type, 2048, 2048, 128, true));
  }
  add(new MatmulBatchedCase(DType::f32, 16, 512, 128, 1));
  add(new MatmulBatchedCase(DType::f32, 16, 512, 128, 64));
  add(new RmsNormCase(128, 2048, 2048));
  add(new ElementwiseCase("silu_mul", 128, 8192));
  add(new ElementwiseCase("add", 128, 2048));
  add(new PagedAttentionCase(DType::f16, 32, 8, 64, 0, {32768}, 1));
  add(new PagedAttentionCase(DType::f16, 16, 1, 576, 512, {32768}, 1));
  add(new PagedAttentionCase(DType::f16, 32, 8, 64, 0, {512}, 512));
  add(new PagedAttentionCase(DType::f16, 8, 1, 128, 0, {32768}, 1));  // one KV head of eight: split by key range only
  // DeepSeek-V3.2's widths: the indexer (64 heads of 128) over a 32K context, MLA over its 2,048 picks.
  add(new IndexerSelectCase(DType::f16, 64, 128, {32768}, 1, 2048));
  add(new PagedAttentionCase(DType::f16, 16, 1, 576, 512, {32768}, 1, 2048));
  add(new MlaExpandedAttentionCase(DType::f32, DType::f16, 16, 512, 128, 64, 128, {2048}, 512));  // V2-Lite widths
  add(new MoeCase(DType::q8_0, ExpertGating::softmax, 1, 16));
  add(new MoeCase(DType::mxfp4, ExpertGating::sqrt_softplus, 1, 16));  // V4-Flash's experts
  // DeepSeek-V4-Flash's widths: a decoded token's attention over a 32K context (window 128; the ratio-4 layer's 512
  // chosen rows, the ratio-128 layer's 256), the compressors over a 2,048-token prompt, the hyper-connections.
  add(new CompressedAttentionCase(DType::f16, 4, {32768}, 1, 64, 512, 128, 512));
  add(new CompressedAttentionCase(DType::f16, 128, {32768}, 1, 64, 512, 128));
  add(new KvCompressCase(DType::f16, 4, 512, {2048}, 64));
  add(new KvCompressCase(DType::f16, 128, 512, {2048}, 64));
  add(new HyperConnectionCase(1, 4096));
  add(new HyperConnectionCase(512, 4096));
  return cases;
}

// The CPU's read bandwidth: a sum over 512 MiB on the backend's threads, best of three.
double measured_read_bandwidth(Backend& backend) {
  const size_t n = size_t(512) << 20 >> 3;
  std::vector<uint64_t> data(n, 1);
  ThreadPool& pool = backend.host_pool();
  std::vector<uint64_t> sums(size_t(pool.n_threads()), 0);
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(int64_t(n), [&](int64_t begin, int64_t end) {
      uint64_t a = 0, b = 0, c = 0, d = 0;
      for (int64_t i = begin; i + 4 <= end; i += 4) {
        a += data[size_t(i)];
        b += data[size_t(i + 1)];
        c += data[size_t(i + 2)];
        d += data[size_t(i + 3)];
      }
      sums[size_t(begin * int64_t(sums.size()) / int64_t(n))] = a + b + c + d;
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(n * 8) / seconds / 1e9);
  }
  return best;
}

int run_tests(Backend& backend, const std::string& only) {
  int failed = 0, ran = 0;
  for (auto& c : test_cases()) {
    if (!only.empty() && c->op != only) continue;
    if (!c->supported(backend)) {
      std::printf("not-run %-12s %-44s %-10s %s\n", c->op.c_str(), c->shape.c_str(), c->dtype.c_str(), c->not_run_reason());
      continue;
    }
    DeviceData data(backend);
    c->setup(backend, data);
    c->run(backend);
    const Outcome outcome = c->check(backend, data);
    const bool ok = outcome.error <= outcome.bound && outcome.note.empty();
    ++ran;
    if (!ok) ++failed;
    std::printf("%-4s %-16s %-44s %-10s e=%.3g bound=%.3g%s%s\n", ok ? "ok" : "FAIL", c->op.c_str(), c->shape.c_str(), c->dtype.c_str(),
                outcome.error, outcome.bound, outcome.note.empty() ? "" : "  ", outcome.note.c_str());
  }
  std::printf("%s: %d cases, %d failed\n", backend.name().c_str(), ran, failed);
  return failed == 0 && ran > 0 ? 0 : 1;
}

int run_perf(Backend& backend, const std::string& only) {
  const double peak = backend.memory_info().bandwidth_bytes_per_s / 1e9;
  const double bandwidth = peak > 0.0 ? peak : measured_read_bandwidth(backend);
  std::printf("%s: %s bandwidth %.1f GB/s\n\n", backend.name().c_str(), peak > 0.0 ? "peak memory" : "measured read", bandwidth);
  std::printf("| op | shape | dtype | us | GB/s | of bandwidth | GFLOP/s |\n| --- | --- | --- | ---: | ---: | ---: | ---: |\n");
  for (auto& c : perf_cases()) {
    if (!only.empty() && c->op != only) continue;
    if (!c->supported(backend)) continue;
    DeviceData data(backend);
    c->setup(backend, data);
    c->run(backend);  // warm-up
    const float* last = data.zeros(1);
    std::vector<double> times;
    for (int rep = 0; rep < 7; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      c->run(backend);
      float sync = 0.0f;  // a download waits for the op
      backend.download(&sync, last, sizeof sync);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    std::printf("| %s | %s | %s | %.1f | %.1f | %.0f%% | %.1f |\n", c->op.c_str(), c->shape.c_str(), c->dtype.c_str(), t * 1e6,
                c->bytes / t / 1e9, 100.0 * c->bytes / t / 1e9 / bandwidth, c->flops / t / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace ds

int main(int argc, char** argv) {
  std::string mode = "test", only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "test" || arg == "perf") mode = arg;
    else if (arg == "--op" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: dsinfer_backend_ops [test|perf] [--op NAME]\n");
      return 2;
    }
  }
  int status = 0;
  // Every backend there is: the CPU always; CUDA where its plugin was built
  // and a GPU is present, else said not run (never passed).
  for (const char* device : {"cpu", "cuda:0"}) {
    auto backend = ds::create_backend(device, 2);
    if (!backend.ok()) {
      if (std::string(device) == "cpu") return 1;
      std::printf("%s: not run: %s\n", device, backend.message().c_str());
      continue;
    }
    status |= mode == "perf" ? ds::run_perf(*backend.value(), only) : ds::run_tests(*backend.value(), only);
  }
  // The AMX tiles once more on one thread (a thread's tile configuration is its own).
  if (mode == "test" && (only.empty() || only == "amx_tiles")) {
    if (!ds::use_amx_kernels()) {
      std::printf("cpu, 1 thread: amx_tiles not run: no AMX\n");
      return status;
    }
    auto one_thread = ds::create_backend("cpu", 1);
    if (!one_thread.ok()) return 1;
    status |= ds::run_tests(*one_thread.value(), "amx_tiles");
  }
  return status;
}
