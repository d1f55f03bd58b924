#include "model/tensor_loader.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>

#include "device/device.h"
#include "kernels/matmul.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

std::string shape_string(const GgufTensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

}  // namespace

const GgufTensorInfo* TensorLoader::find(const std::string& name) const {
  asked_.insert(name);
  return file_.find_tensor(name);
}

std::vector<std::string> TensorLoader::unread() const {
  std::vector<std::string> names;
  for (const GgufTensorInfo& t : file_.tensors()) {
    if (!asked_.count(t.name)) names.push_back(t.name);
  }
  return names;
}

Result<const GgufTensorInfo*> TensorLoader::stacked(const std::string& name, int64_t n_slices, int64_t n_rows, int64_t n_cols) const {
  const GgufTensorInfo* t = find(name);
  if (!t) return Status::error("model: tensor '" + name + "' is missing");
  const bool shape_ok = t->ne[0] == n_cols && t->ne[1] == n_rows &&
                        (t->n_dims == 3 ? t->ne[2] == n_slices : t->n_dims == 2 && n_slices == 1);
  if (!shape_ok) {
    return Status::error("model: tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(n_cols) +
                         ", " + std::to_string(n_rows) + ", " + std::to_string(n_slices) + "]");
  }
  DS_RETURN_IF_ERROR(check_type(name, *t));
  return t;
}

Status TensorLoader::slices(const std::string& name, int64_t n_slices, int64_t n_rows, int64_t n_cols, std::vector<WeightMatrix>* out,
                            Split split) {
  if (!ranks_.split()) split = Split::none;
  const int64_t file_rows = split == Split::rows ? n_rows * ranks_.ranks : n_rows;
  const int64_t file_cols = split == Split::columns ? n_cols * ranks_.ranks : n_cols;
  auto t = stacked(name, n_slices, file_rows, file_cols);
  if (!t.ok()) return t.status();
  out->resize(size_t(n_slices));
  if (split == Split::slices && n_slices % ranks_.ranks != 0) {
    return Status::error("tensor parallel: the " + std::to_string(n_slices) + " matrices of tensor '" + name + "' do not divide among " +
                         std::to_string(ranks_.ranks) + " ranks");
  }
  const int64_t mine = n_slices / ranks_.ranks, first_mine = ranks_.rank * mine;
  for (int64_t i = 0; i < n_slices; ++i) {
    WeightMatrix* slice = &(*out)[size_t(i)];
    if (split == Split::slices && (i < first_mine || i >= first_mine + mine)) {
      *slice = WeightMatrix{t.value()->type, n_rows, n_cols, nullptr};  // another rank's
    } else if (split == Split::columns) {
      DS_RETURN_IF_ERROR(columns(t.value(), i * n_rows, n_rows, ranks_.rank * n_cols, n_cols, slice));
    } else {
      DS_RETURN_IF_ERROR(rows(t.value(), i * file_rows + (split == Split::rows ? ranks_.rank * n_rows : 0), n_rows, slice));
    }
  }
  return Status();
}

Status TensorLoader::rows(const GgufTensorInfo* t, int64_t first, int64_t n, WeightMatrix* out, bool for_matmul) {
  const size_t offset = size_t(first * row_bytes(t->type, t->ne[0]));
  *out = WeightMatrix{t->type, n, t->ne[0], file_.tensor_data(*t) + offset};
  const int64_t tensor_rows = t->n_elements() / t->ne[0];
  const bool interleave = for_matmul && backend_.repacks(t->type, n, t->ne[0]) && backend_.repacks(t->type, first, t->ne[0]) &&
                          backend_.repacks(t->type, tensor_rows, t->ne[0]);
  matrices_.push_back({out, t, offset, interleave, for_matmul});
  if (t->type != DType::i8) return Status();
  if (!for_matmul) {
    return Status::error("model: tensor '" + t->name + "' is I8 (W8A8), which serves matrix multiplies only; this one is "
                         "looked up by row: write it in a float or block type");
  }
  return row_scales(*t, first, n, out);
}

Status TensorLoader::row_scales(const GgufTensorInfo& t, int64_t first, int64_t n, WeightMatrix* out) {
  const std::string name = t.name + "_scale";
  const GgufTensorInfo* s = find(name);
  const int64_t tensor_rows = t.n_elements() / t.ne[0];
  if (!s) return Status::error("model: tensor '" + t.name + "' is I8 (W8A8) but its row scales '" + name + "' are missing");
  if (s->type != DType::f32 || s->n_elements() != tensor_rows) {
    return Status::error("model: tensor '" + name + "' must be F32 with one scale per row of '" + t.name + "' (" +
                         std::to_string(tensor_rows) + "), not " + dtype_name(s->type) + " " + shape_string(*s));
  }
  if (t.ne[0] > k_max_i8_cols) {
    return Status::error("model: tensor '" + t.name + "' has rows of " + std::to_string(t.ne[0]) +
                         " elements, more than an I8 matmul sums exactly in int32 (" + std::to_string(k_max_i8_cols) + ")");
  }
  std::vector<float> values(static_cast<size_t>(n));
  std::memcpy(values.data(), file_.tensor_data(*s) + first * 4, size_t(n) * 4);
  staged_.push_back({&out->row_scales, nullptr, reinterpret_cast<const uint8_t*>(values.data()), size_t(n) * sizeof(float)});
  staged_vectors_.push_back(std::move(values));
  // Zero points, where the rows are asymmetric (W8A8_ASYM).
  const std::string zero_name = t.name + "_zero_point";
  if (const GgufTensorInfo* z = find(zero_name)) {
    if (z->type != DType::i32 || z->n_elements() != tensor_rows) {
      return Status::error("model: tensor '" + zero_name + "' must be I32 with one zero point per row of '" + t.name + "' (" +
                           std::to_string(tensor_rows) + "), not " + dtype_name(z->type) + " " + shape_string(*z));
    }
    std::vector<uint8_t> points(size_t(n) * 4);
    std::memcpy(points.data(), file_.tensor_data(*z) + first * 4, points.size());
    for (int64_t r = 0; r < n; ++r) {
      int32_t v;
      std::memcpy(&v, points.data() + r * 4, 4);
      if (v < -127 || v > 127) return Status::error("model: tensor '" + zero_name + "' holds a zero point outside [-127, 127]");
    }
    staged_.push_back({nullptr, nullptr, points.data(), points.size(), &out->row_zero_points});
    staged_bytes_.push_back(std::move(points));
  }
  // A calibrated static activation scale, where the quantizer wrote one (else per token).
  const std::string input_name = t.name + "_input_scale";
  if (const GgufTensorInfo* in = find(input_name)) {
    float scale = 0.0f;
    if (in->type == DType::f32 && in->n_elements() == 1) std::memcpy(&scale, file_.tensor_data(*in), 4);
    if (!(scale > 0.0f && std::isfinite(scale)))
      return Status::error("model: tensor '" + input_name + "' must be one positive finite F32 value");
    out->input_scale = scale;
  }
  return Status();
}

Status TensorLoader::check_type(const std::string& name, const GgufTensorInfo& t) const {
  if (is_compute_supported(t.type) && !backend_.supports(t.type)) {
    return Status::error("model: tensor '" + name + "' has type " + dtype_name(t.type) + ", which the " + backend_.name() +
                         " backend does not run");
  }
  if (is_compute_supported(t.type)) return Status();
  return Status::error("model: tensor '" + name + "' has type " + dtype_name(t.type) +
                       ", which dsinfer does not support (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                       "Q4_K, Q5_K, Q6_K, and I8 with row scales: W8A8)");
}

Status TensorLoader::matrix(const std::string& name, int64_t n_rows, int64_t n_cols, WeightMatrix* out, bool for_matmul, Split split) {
  const GgufTensorInfo* t = find(name);
  if (!t) return Status::error("model: tensor '" + name + "' is missing");
  if (!ranks_.split()) split = Split::none;
  const int64_t file_rows = split == Split::rows ? n_rows * ranks_.ranks : n_rows;
  const int64_t file_cols = split == Split::columns ? n_cols * ranks_.ranks : n_cols;
  if (t->n_dims != 2 || t->ne[0] != file_cols || t->ne[1] != file_rows) {
    return Status::error("model: tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" +
                         std::to_string(file_cols) + ", " + std::to_string(file_rows) + "]");
  }
  DS_RETURN_IF_ERROR(check_type(name, *t));
  if (split == Split::columns) return columns(t, 0, n_rows, ranks_.rank * n_cols, n_cols, out);
  return rows(t, split == Split::rows ? ranks_.rank * n_rows : 0, n_rows, out, for_matmul);
}

Status TensorLoader::columns(const GgufTensorInfo* t, int64_t first_row, int64_t n_rows, int64_t first_col, int64_t n_cols,
                             WeightMatrix* out) {
  const int64_t block = dtype_traits(t->type).block_elements;
  if (t->type == DType::i8) {
    return Status::error("tensor parallel: tensor '" + t->name + "' is I8 (W8A8), whose split by columns is not implemented");
  }
  if (first_col % block != 0 || n_cols % block != 0) {
    return Status::error("tensor parallel: tensor '" + t->name + "' (" + dtype_name(t->type) + ") splits into parts of " +
                         std::to_string(n_cols) + " columns, not whole blocks of " + std::to_string(block));
  }
  const int64_t in_row = row_bytes(t->type, t->ne[0]), out_row = row_bytes(t->type, n_cols);
  const uint8_t* from = file_.tensor_data(*t) + first_row * in_row + row_bytes(t->type, first_col);
  std::vector<uint8_t> bytes(size_t(n_rows * out_row));
  for (int64_t r = 0; r < n_rows; ++r) std::memcpy(bytes.data() + r * out_row, from + r * in_row, size_t(out_row));
  derived(t->type, n_rows, n_cols, std::move(bytes), out, backend_.repacks(t->type, n_rows, n_cols));
  return Status();
}

Status TensorLoader::integers(const std::string& name, int64_t n_rows, int64_t n_cols, int64_t bound, std::vector<int32_t>* out) const {
  const GgufTensorInfo* t = find(name);
  if (!t) return Status::error("model: tensor '" + name + "' is missing");
  if (t->n_dims != 2 || t->ne[0] != n_cols || t->ne[1] != n_rows) {
    return Status::error("model: tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(n_cols) + ", " +
                         std::to_string(n_rows) + "]");
  }
  if (t->type != DType::i32) return Status::error("model: tensor '" + name + "' has type " + dtype_name(t->type) + "; it must be I32");
  out->resize(size_t(n_rows * n_cols));
  std::memcpy(out->data(), file_.tensor_data(*t), out->size() * sizeof(int32_t));
  for (size_t i = 0; i < out->size(); ++i) {
    if ((*out)[i] < 0 || (*out)[i] >= bound) {
      return Status::error("model: tensor '" + name + "' holds " + std::to_string((*out)[i]) + " at element " + std::to_string(i) +
                           ", outside [0, " + std::to_string(bound) + ")");
    }
  }
  return Status();
}

Status TensorLoader::table(const std::string& name, int64_t n_rows, int64_t n_cols, WeightVector* out) {
  const GgufTensorInfo* t = find(name);
  if (t && (t->n_dims != 2 || t->ne[0] != n_cols || t->ne[1] != n_rows)) {
    return Status::error("model: tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(n_cols) + ", " +
                         std::to_string(n_rows) + "]");
  }
  // A quantizer may have given the table a block type (llama.cpp's MXFP4_MOE gives Q8_0 to every 2-D tensor): its values are exact.
  if (t && t->type != DType::i8 && is_compute_supported(t->type) && n_cols % dtype_traits(t->type).block_elements == 0) {
    std::vector<float> values(size_t(n_rows * n_cols));
    dequantize_row(t->type, file_.tensor_data(*t), values.data(), n_rows * n_cols);
    out->n = n_rows * n_cols;
    staged_.push_back({&out->data, nullptr, reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)});
    staged_vectors_.push_back(std::move(values));
    return Status();
  }
  return values(name, t, 0, n_rows * n_cols, out, false);
}

Status TensorLoader::vector(const std::string& name, int64_t n, WeightVector* out, bool optional, Split split) {
  const GgufTensorInfo* t = find(name);
  const int64_t parts = split == Split::rows ? ranks_.ranks : 1, file_n = n * parts;
  if (t && (t->n_elements() != file_n || t->ne[0] != file_n)) {
    return Status::error("model: tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(file_n) + "]");
  }
  return values(name, t, parts > 1 ? ranks_.rank * n : 0, n, out, optional);
}

Status TensorLoader::values(const std::string& name, const GgufTensorInfo* t, int64_t first, int64_t n, WeightVector* out, bool optional) {
  if (!t) return optional ? Status() : Status::error("model: tensor '" + name + "' is missing");
  if (t->type != DType::f32 && t->type != DType::f16 && t->type != DType::bf16) {
    return Status::error("model: tensor '" + name + "' has type " + dtype_name(t->type) + "; vectors must be F32, F16 or BF16");
  }
  std::vector<float> values(static_cast<size_t>(n));
  dequantize_row(t->type, file_.tensor_data(*t) + row_bytes(t->type, first), values.data(), n);
  out->n = n;
  staged_.push_back({&out->data, nullptr, reinterpret_cast<const uint8_t*>(values.data()), size_t(n) * sizeof(float)});
  staged_vectors_.push_back(std::move(values));
  return Status();
}

Status TensorLoader::transposed_rows(const GgufTensorInfo* t, int64_t first, int64_t n, WeightMatrix* out) {
  if (t->type == DType::i8) {
    return Status::error("model: tensor '" + t->name + "' is I8 (W8A8): it is transposed at load, which needs a float or "
                         "block type (keep attention out of W8A8, or write attn_k_b/attn_v_b)");
  }
  const int64_t n_cols = t->ne[0], in_row_bytes = row_bytes(t->type, n_cols);
  const DType type = t->type == DType::f16 || t->type == DType::bf16 ? t->type : DType::f32;
  const int64_t out_row_bytes = row_bytes(type, n);
  std::vector<float> row(static_cast<size_t>(n_cols)), transposed(size_t(n_cols * n));
  for (int64_t r = 0; r < n; ++r) {
    dequantize_row(t->type, file_.tensor_data(*t) + (first + r) * in_row_bytes, row.data(), n_cols);
    for (int64_t c = 0; c < n_cols; ++c) transposed[size_t(c * n + r)] = row[size_t(c)];
  }
  std::vector<uint8_t> bytes(size_t(n_cols * out_row_bytes));
  for (int64_t c = 0; c < n_cols; ++c) quantize_row(type, transposed.data() + c * n, bytes.data() + c * out_row_bytes, n);
  derived(type, n_cols, n, std::move(bytes), out);
  return Status();
}

void TensorLoader::derived(DType type, int64_t n_rows, int64_t n_cols, std::vector<uint8_t> bytes, WeightMatrix* out, bool interleave) {
  *out = WeightMatrix{type, n_rows, n_cols, nullptr};
  staged_.push_back({nullptr, out, bytes.data(), bytes.size(), nullptr, interleave});
  staged_bytes_.push_back(std::move(bytes));
}

// place() copies into one allocation of the backend's memory every tensor that a
// matrix multiply reads, repacked where the backend has a layout
// (interleave), or every tensor (mode copy, or a backend that cannot read
// the mapping), and the vectors and derived matrices; points the weights at
// their copies. The rest (tables read by row) stay in the mapping, and so
// does every matrix when interleave is off (--no-repack keeps the file's
// pages). A multiply reads the backend's memory faster than the mapping: on
// the CPU, huge pages where the mapping has 4 KiB ones, and F16 decode
// measured 24% faster from them.
Status TensorLoader::place(LoadMode mode, bool interleave, DeviceBuffer* memory, size_t* total_bytes) {
  const bool in_place = mode == LoadMode::mmap && backend_.reads_host_memory();
  // The copies, by tensor and layout (repacked or not): the bytes of the
  // tensor's rows that some matrix reads (all of them, but for a rank's part
  // under tensor parallel), and their offset in the allocation.
  struct Copy {
    size_t begin = SIZE_MAX, end = 0, at = 0;
  };
  std::map<std::pair<const GgufTensorInfo*, bool>, Copy> copies;
  std::unordered_map<const GgufTensorInfo*, bool> stays_mapped;
  size_t total = 0, bytes = 0;
  const auto take = [&bytes](size_t n) {
    const size_t at = bytes;
    bytes += (n + 63) / 64 * 64;
    return at;
  };
  for (auto& m : matrices_) {
    m.interleave = m.interleave && interleave;
    if (!stays_mapped.count(m.info)) total += m.info->n_bytes;
    bool& mapped = stays_mapped[m.info];
    if (in_place && !(m.matmul && interleave)) {
      mapped = true;
      continue;
    }
    Copy& copy = copies[std::make_pair(m.info, m.interleave)];
    copy.begin = std::min(copy.begin, m.offset);
    copy.end = std::max(copy.end, m.offset + size_t(m.matrix->n_rows * row_bytes(m.info->type, m.info->ne[0])));
  }
  for (auto& [key, copy] : copies) copy.at = take(copy.end - copy.begin);
  std::vector<size_t> staged_at;
  for (const Staged& s : staged_) staged_at.push_back(take(s.n_bytes));
  *total_bytes = total;
  auto allocated = backend_.allocate(bytes);
  if (!allocated.ok()) return Status::error("model: weights: " + allocated.message());
  *memory = allocated.take();
  uint8_t* base = memory->data();
  // Tensors are copied in parallel, largest first, each by one thread: the
  // copy is bound by memory bandwidth and by the kernel zeroing the new pages,
  // and one thread alone reaches neither limit.
  std::vector<std::pair<std::pair<const GgufTensorInfo*, bool>, Copy>> jobs(copies.begin(), copies.end());
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.second.end - a.second.begin > b.second.end - b.second.begin; });
  std::atomic<size_t> next{0};
  const auto copy_some = [&] {
    for (size_t j; (j = next++) < jobs.size();) {
      const auto& [key, copy] = jobs[j];
      const GgufTensorInfo& t = *key.first;
      const int64_t n_rows = int64_t(copy.end - copy.begin) / row_bytes(t.type, t.ne[0]);
      backend_.store_matrix(t.type, n_rows, t.ne[0], file_.tensor_data(t) + copy.begin, base + copy.at, key.second);
      // At once, so that the process never holds a whole second copy.
      if (!stays_mapped.at(key.first)) file_.release_tensor_pages(t);
    }
  };
  std::vector<std::thread> helpers;
  for (int i = 1; i < std::min<int>(usable_cpu_count(), int(jobs.size())); ++i) helpers.emplace_back(copy_some);
  copy_some();
  for (std::thread& helper : helpers) helper.join();
  for (auto& m : matrices_) {
    named_.push_back({m.info->name, int64_t(m.offset) / row_bytes(m.info->type, m.info->ne[0]), m.matrix});
    auto it = copies.find(std::make_pair(m.info, m.interleave));
    if (it == copies.end()) continue;
    m.matrix->data = base + it->second.at + (m.offset - it->second.begin);
    m.matrix->repacked = m.interleave;
  }
  for (size_t i = 0; i < staged_.size(); ++i) {
    uint8_t* at = base + staged_at[i];
    WeightMatrix* matrix = staged_[i].matrix;
    if (matrix && staged_[i].interleave && interleave) {
      backend_.store_matrix(matrix->type, matrix->n_rows, matrix->n_cols, staged_[i].host, at, true);
      matrix->repacked = true;
    } else {
      backend_.upload(at, staged_[i].host, staged_[i].n_bytes);
    }
    if (staged_[i].vector) *staged_[i].vector = reinterpret_cast<const float*>(at);
    if (staged_[i].integers) *staged_[i].integers = reinterpret_cast<const int32_t*>(at);
    if (staged_[i].matrix) staged_[i].matrix->data = at;
  }
  return Status();
}

}  // namespace ds
