#include "quant/model_quantizer.h"

#include <cstring>
#include <map>

#include "base/thread_pool.h"
#include "gguf/gguf_writer.h"
#include "kernels/matmul.h"
#include "quant/smoothing.h"
#include "quant/weight_encoder.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// llama.cpp's llama_ftype for the targets that have one (general.file_type).
std::optional<uint32_t> llama_file_type(const std::string& target) {
  static const std::map<std::string, uint32_t> types = {
      {"F32", 0},     {"F16", 1},     {"Q4_0", 2},     {"Q4_1", 3},     {"Q8_0", 7},  {"Q5_0", 8},   {"Q5_1", 9},
      {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16},  {"Q5_K_M", 17},  {"Q6_K", 18}, {"BF16", 32}};
  auto it = types.find(target);
  return it == types.end() ? std::nullopt : std::optional<uint32_t>(it->second);
}

// One output tensor and how its bytes are made from a source tensor.
struct Plan {
  const GgufTensorInfo* source;
  std::string name;
  DType to;
  enum { copy, convert, w8a8_weights, w8a8_scales, w8a8_zero_points, w8a8_input_scale } how;
  const TensorTransform* transform = nullptr;  // smoothing factors applied while converting
  float input_scale = 0.0f;                    // for w8a8_input_scale
};

// A W8A8 matrix's input after smoothing (divided by the factors its columns
// took): its largest |x| and the clip `choice` picks from the sample.
std::pair<float, float> smoothed_input_clip(const InputStatistics& stats, const TensorTransform* t,
                                            const std::optional<ClipChoice>& choice) {
  const bool divided = t && !t->columns.empty();
  float absmax = 0.0f;
  for (int64_t j = 0; j < stats.n_cols; ++j)
    absmax = std::max(absmax, stats.channel_absmax[size_t(j)] / (divided ? t->columns[size_t(j)] : 1.0f));
  if (!choice) return {absmax, 0.0f};
  std::vector<float> sample = stats.samples;
  if (divided)
    for (size_t i = 0; i < sample.size(); ++i) sample[i] /= t->columns[i % size_t(stats.n_cols)];
  return {absmax, choose_clip(sample, absmax, *choice)};
}

std::vector<int64_t> shape_of(const GgufTensorInfo& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); }

int64_t rows_of(const GgufTensorInfo& t) {
  int64_t rows = 1;
  for (int d = 1; d < t.n_dims; ++d) rows *= t.ne[d];
  return rows;
}

// Row r of a tensor times its smoothing factors (row factors repeat per expert of a 3-d tensor).
void apply(const TensorTransform& t, int64_t r, std::vector<float>& row) {
  if (!t.columns.empty())
    for (size_t k = 0; k < row.size(); ++k) row[k] *= t.columns[k];
  if (!t.rows.empty())
    for (float& v : row) v *= t.rows[size_t(r) % t.rows.size()];
}

// The calibration table, readable from the file: what was seen, and for each
// W8A8 matrix its input's largest |x| and the static clip (0: per token).
void add_calibration_metadata(GgufWriter& writer, const Calibration& c, const QuantizeOptions& options,
                              const QuantizeReport& report) {
  writer.add_uint32("dsinfer.calibration.tokens", uint32_t(std::min<int64_t>(c.tokens, UINT32_MAX)));
  writer.add_float32("dsinfer.calibration.smooth_alpha", options.smooth_alpha);
  writer.add_string("dsinfer.calibration.activation_scales",
                    options.static_activations ? clip_method_name(options.static_activations->method) : "per-token");
  std::vector<std::string> names;
  std::vector<float> absmax, clip;
  for (const QuantizedTensor& t : report.tensors) {
    if (!t.calibrated) continue;
    names.push_back(t.name);
    absmax.push_back(t.input_absmax);
    clip.push_back(t.input_clip);
  }
  writer.add_string_array("dsinfer.calibration.tensors", names);
  writer.add_float32_array("dsinfer.calibration.input_absmax", absmax);
  writer.add_float32_array("dsinfer.calibration.input_clip", clip);
}

}  // namespace

Result<QuantizeReport> quantize_model(const GgufFile& in, const QuantPolicy& policy, const std::string& out_path,
                                      const QuantizeOptions& options) {
  QuantizeReport report;
  std::vector<Plan> plans;
  if ((options.smooth_alpha > 0 || options.static_activations) && !options.calibration)
    return Status::error("smoothing and static activation scales need a calibration (--calib)");
  const auto is_w8a8 = [&](const std::string& name) { return policy.choice_for(name).is_w8a8(); };
  const std::map<std::string, TensorTransform> transforms =
      options.smooth_alpha > 0 ? smoothing_transforms(in, *options.calibration, options.smooth_alpha, is_w8a8)
                               : std::map<std::string, TensorTransform>();
  for (const GgufTensorInfo& t : in.tensors()) {
    report.bytes_in += t.n_bytes;
    QuantChoice choice = t.n_dims >= 2 ? policy.choice_for(t.name) : QuantChoice{QuantChoice::type, DType::f32};
    // An integer vector, or a table of 16 to 64-bit integers (V4's hash routing), is data, not a weight.
    const bool integer_table = t.type == DType::i16 || t.type == DType::i32 || t.type == DType::i64;
    if ((t.n_dims < 2 && !is_float(t.type)) || integer_table) choice = {QuantChoice::keep};
    QuantizedTensor entry{t.name, t.type, t.type};
    auto transform = transforms.find(t.name);
    const TensorTransform* factors = transform == transforms.end() ? nullptr : &transform->second;
    entry.smoothed = factors != nullptr;
    if (choice.kind == QuantChoice::keep) choice = {QuantChoice::type, t.type};
    if (choice.kind == QuantChoice::type && choice.dtype == t.type && !factors) {
      plans.push_back({&t, t.name, t.type, Plan::copy});
    } else if (!is_float(t.type)) {
      return Status::error("tensor '" + t.name + "' is already " + dtype_name(t.type) + ": quantize from an F32, F16 or BF16 model");
    } else if (choice.is_w8a8()) {
      if (t.ne[0] > k_max_i8_cols)
        return Status::error("tensor '" + t.name + "': rows of " + std::to_string(t.ne[0]) + " are longer than W8A8 sums exactly (" +
                             std::to_string(k_max_i8_cols) + ")");
      entry.to = DType::i8;
      entry.w8a8 = true;
      plans.push_back({&t, t.name, DType::i8, Plan::w8a8_weights, factors});
      plans.push_back({&t, t.name + k_row_scale_suffix, DType::f32, Plan::w8a8_scales});
      entry.zero_points = choice.kind == QuantChoice::w8a8_asym;
      if (entry.zero_points) plans.push_back({&t, t.name + k_zero_point_suffix, DType::i32, Plan::w8a8_zero_points});
      if (const InputStatistics* stats = options.calibration ? options.calibration->find(t.name) : nullptr) {
        std::tie(entry.input_absmax, entry.input_clip) = smoothed_input_clip(*stats, factors, options.static_activations);
        entry.calibrated = true;
        if (entry.input_clip > 0)
          plans.push_back({&t, t.name + k_input_scale_suffix, DType::f32, Plan::w8a8_input_scale, nullptr, entry.input_clip / 127.0f});
      }
    } else {
      entry.to = fallback_type(choice.dtype, t.ne[0]);
      entry.fell_back = entry.to != choice.dtype;
      plans.push_back({&t, t.name, entry.to, Plan::convert, factors});
    }
    report.tensors.push_back(entry);
  }

  GgufWriter writer;
  for (const auto& [key, value] : in.metadata()) {
    if (key == "general.file_type" || key == "general.quantization_version" || key.rfind("dsinfer.quantize.", 0) == 0 ||
        key.rfind("dsinfer.calibration.", 0) == 0)
      continue;
    const Status copied = writer.add_value(key, value);
    if (!copied.ok()) return copied;
  }
  if (auto file_type = llama_file_type(policy.target())) writer.add_uint32("general.file_type", *file_type);
  writer.add_uint32("general.quantization_version", 2);
  writer.add_string("dsinfer.quantize.target", policy.target());
  writer.add_string("dsinfer.quantize.policy", policy.describe());
  if (options.calibration) add_calibration_metadata(writer, *options.calibration, options, report);
  std::map<std::string, bool> asymmetric;  // by W8A8 matrix: with zero points
  for (const Plan& p : plans) {
    std::vector<int64_t> shape = shape_of(*p.source);
    if (p.how == Plan::w8a8_scales || p.how == Plan::w8a8_zero_points) shape.erase(shape.begin());  // one per row
    if (p.how == Plan::w8a8_input_scale) shape = {1};
    writer.declare_tensor(p.name, p.to, shape);
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    report.bytes_out += uint64_t(row_bytes(p.to, shape[0])) * uint64_t(elements / shape[0]);
    if (p.how == Plan::w8a8_weights) asymmetric[p.name] = policy.choice_for(p.name).kind == QuantChoice::w8a8_asym;
  }

  ThreadPool pool(options.n_threads);
  std::vector<float> row_scales;         // made with a W8A8 matrix, written as the next tensor
  std::vector<int32_t> row_zero_points;  // and with W8A8_ASYM, the one after
  size_t done = 0;
  const Status written = writer.write_file(out_path, [&](size_t index, std::vector<uint8_t>& bytes) -> Status {
    const Plan& p = plans[index];
    const GgufTensorInfo& t = *p.source;
    const int64_t n_cols = t.ne[0], n_rows = rows_of(t);
    const uint8_t* src = in.tensor_data(t);
    const int64_t src_row = row_bytes(t.type, n_cols), dst_row = row_bytes(p.to, n_cols);
    switch (p.how) {
      case Plan::copy: bytes.assign(src, src + t.n_bytes); break;
      case Plan::w8a8_scales:
        bytes.resize(row_scales.size() * sizeof(float));
        std::memcpy(bytes.data(), row_scales.data(), bytes.size());
        break;
      case Plan::w8a8_zero_points:
        bytes.resize(row_zero_points.size() * sizeof(int32_t));
        std::memcpy(bytes.data(), row_zero_points.data(), bytes.size());
        break;
      case Plan::w8a8_input_scale:
        bytes.resize(sizeof(float));
        std::memcpy(bytes.data(), &p.input_scale, sizeof(float));
        break;
      case Plan::convert:
      case Plan::w8a8_weights:
        bytes.resize(size_t(dst_row * n_rows));
        const bool asym = p.how == Plan::w8a8_weights && asymmetric.at(p.name);
        if (p.how == Plan::w8a8_weights) row_scales.assign(size_t(n_rows), 0.0f), row_zero_points.assign(size_t(n_rows), 0);
        pool.parallel_for_dynamic(n_rows, 16, [&](int64_t begin, int64_t end, int) {
          std::vector<float> row(static_cast<size_t>(n_cols));
          for (int64_t r = begin; r < end; ++r) {
            dequantize_row(t.type, src + r * src_row, row.data(), n_cols);
            if (p.transform) apply(*p.transform, r, row);
            uint8_t* out = bytes.data() + r * dst_row;
            if (p.how == Plan::w8a8_weights) {
              auto* codes = reinterpret_cast<int8_t*>(out);
              row_scales[size_t(r)] = asym ? quantize_int8_row_asymmetric(row.data(), n_cols, codes, &row_zero_points[size_t(r)])
                                           : quantize_int8_row(row.data(), n_cols, codes);
            } else {
              DS_CHECK(quantize_weight_row(p.to, row.data(), out, n_cols), "every policy type has an encoder");
            }
          }
        });
        break;
    }
    in.release_tensor_pages(t);
    if (p.how == Plan::copy || p.how == Plan::convert || p.how == Plan::w8a8_scales) ++done;  // a W8A8 matrix counts once
    if (options.progress) options.progress(done, report.tensors.size());
    return Status();
  });
  if (!written.ok()) return written;
  return report;
}

}  // namespace ds
