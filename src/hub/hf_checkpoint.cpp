#include "hub/hf_checkpoint.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "hub/json_file.h"
#include "base/fp16.h"

namespace ds {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* k_scale_inv_suffix = "_scale_inv";  // V3's: NAME_scale_inv
constexpr const char* k_weight_suffix = ".weight";         // V4's: STEM.weight's scales are STEM.scale
constexpr const char* k_scale_suffix = ".scale";

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

float element_f32(SafetensorsType type, const uint8_t* p) {
  switch (type) {
    case SafetensorsType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case SafetensorsType::f16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fp16_to_fp32(h);
    }
    case SafetensorsType::bf16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_fp32(h);
    }
    case SafetensorsType::f8_e4m3:
      return fp8_e4m3_to_f32(*p);
    case SafetensorsType::f8_e8m0:
      return *p == 0xff ? NAN : std::ldexp(1.0f, int(*p) - 127);
    default:
      return NAN;
  }
}

bool is_float(SafetensorsType type) {
  return type == SafetensorsType::f32 || type == SafetensorsType::f16 || type == SafetensorsType::bf16 || type == SafetensorsType::f8_e4m3;
}

bool is_integer(SafetensorsType type) {
  return type == SafetensorsType::i64 || type == SafetensorsType::i32 || type == SafetensorsType::i16 || type == SafetensorsType::i8 ||
         type == SafetensorsType::u8;
}

int64_t element_integer(SafetensorsType type, const uint8_t* p) {
  switch (type) {
    case SafetensorsType::i64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case SafetensorsType::i32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case SafetensorsType::i16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case SafetensorsType::i8:
      return int8_t(*p);
    default:
      return *p;
  }
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t x) {
  const bool negative = x & 0x80;
  const int exponent = (x >> 3) & 0xf, mantissa = x & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return NAN;
  // Subnormals: mantissa / 8 * 2^-6; normals: (1 + mantissa / 8) * 2^(exponent - 7).
  const float magnitude = exponent == 0 ? std::ldexp(float(mantissa), -9) : std::ldexp(float(8 + mantissa), exponent - 10);
  return negative ? -magnitude : magnitude;
}

Result<std::unique_ptr<HfCheckpoint>> HfCheckpoint::open(const std::string& dir) {
  auto checkpoint = std::unique_ptr<HfCheckpoint>(new HfCheckpoint());
  checkpoint->dir_ = dir;
  auto config = read_json_object(dir + "/config.json");
  if (!config.ok()) return config.status();
  checkpoint->config_ = config.take();
  // DeepSeek's FP8 release: {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}.
  if (checkpoint->config_.contains("quantization_config")) {
    const json& q = checkpoint->config_["quantization_config"];
    if (!q.is_object() || q.value("quant_method", "") != "fp8") {
      return Status::error(dir + "/config.json: quantization_config " + q.dump().substr(0, 200) + " is not one dsinfer converts (FP8 block-scaled only)");
    }
    if (q.contains("weight_block_size")) {
      const json& b = q["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_unsigned() || !b[1].is_number_unsigned() || b[0] == 0 || b[1] == 0) {
        return Status::error(dir + "/config.json: quantization_config.weight_block_size must be [rows, columns]");
      }
      checkpoint->fp8_block_ = {b[0].get<int64_t>(), b[1].get<int64_t>()};
    }
  }
  // The shards: the index's, each checked to be there; else the one file.
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (fs::exists(index_path)) {
    auto index = read_json_object(index_path);
    if (!index.ok()) return index.status();
    if (!index.value().contains("weight_map") || !index.value()["weight_map"].is_object()) {
      return Status::error(index_path + ": no weight_map");
    }
    for (const auto& [tensor, shard] : index.value()["weight_map"].items()) {
      if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos) {
        return Status::error(index_path + ": the shard of '" + tensor + "' is not a file name");
      }
      weight_map[tensor] = shard;
    }
  } else if (fs::exists(dir + "/model.safetensors")) {
    weight_map[""] = "model.safetensors";
  } else {
    return Status::error(dir + ": no model.safetensors nor model.safetensors.index.json");
  }
  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [tensor, shard] : weight_map) {
    if (opened.count(shard)) continue;
    const std::string path = dir + "/" + shard;
    if (!fs::exists(path)) return Status::error("missing shard " + path + " (the index places '" + tensor + "' in it)");
    auto file = SafetensorsFile::open(path);
    if (!file.ok()) return file.status();
    opened[shard] = file.value().get();
    checkpoint->shards_.push_back(file.take());
  }
  for (const auto& shard : checkpoint->shards_) {
    for (const auto& [name, tensor] : shard->tensors()) {
      if (checkpoint->tensors_.count(name)) return Status::error("tensor '" + name + "' is in two shards (again in " + shard->path() + ")");
      checkpoint->tensors_[name] = {shard.get(), &tensor};
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    if (tensor.empty()) continue;
    const auto it = checkpoint->tensors_.find(tensor);
    if (it == checkpoint->tensors_.end() || it->second.file != opened[shard]) {
      return Status::error(dir + "/" + shard + ": has no tensor '" + tensor + "', which the index places in it");
    }
  }
  return checkpoint;
}

std::vector<std::string> HfCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, located] : tensors_) names.push_back(name);
  return names;
}

const SafetensorsTensor* HfCheckpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.tensor;
}

bool HfCheckpoint::is_scale(const std::string& name) const {
  if (ends_with(name, k_scale_inv_suffix)) {
    const SafetensorsTensor* weight = find(name.substr(0, name.size() - std::strlen(k_scale_inv_suffix)));
    return weight && weight->type == SafetensorsType::f8_e4m3;
  }
  if (!ends_with(name, k_scale_suffix)) return false;
  const SafetensorsTensor* weight = find(name.substr(0, name.size() - std::strlen(k_scale_suffix)) + k_weight_suffix);
  return weight && (weight->type == SafetensorsType::f8_e4m3 || weight->type == SafetensorsType::i8 || weight->type == SafetensorsType::u8);
}

std::string HfCheckpoint::scale_name(const std::string& weight) const {
  if (ends_with(weight, k_weight_suffix)) {
    const std::string v4 = weight.substr(0, weight.size() - std::strlen(k_weight_suffix)) + k_scale_suffix;
    if (find(v4)) return v4;
  }
  return weight + k_scale_inv_suffix;
}

Result<HfCheckpoint::Located> HfCheckpoint::locate(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return Status::error(dir_ + ": no tensor '" + name + "'");
  return it->second;
}

Result<HfCheckpoint::RowReader> HfCheckpoint::rows(const std::string& name) const {
  auto located = locate(name);
  if (!located.ok()) return located.status();
  RowReader reader;
  reader.file_ = located.value().file;
  reader.tensor_ = located.value().tensor;
  const SafetensorsTensor& t = *reader.tensor_;
  const std::string where = reader.file_->path() + ": tensor '" + name + "'";
  if (t.shape.empty() || t.shape.size() > 2) return Status::error(where + " is neither a vector nor a matrix");
  reader.rows_ = t.shape.size() == 2 ? t.shape[0] : 1;
  reader.columns_ = t.shape.back();
  const std::string scale_name = this->scale_name(name);
  const bool packed = (t.type == SafetensorsType::i8 || t.type == SafetensorsType::u8) && find(scale_name);
  if (!is_float(t.type) && !is_integer(t.type)) {
    return Status::error(where + " is " + safetensors_type_name(t.type) + ", not a type dsinfer converts");
  }
  reader.stored_ = t.type == SafetensorsType::f32    ? Stored::f32
                   : t.type == SafetensorsType::f16  ? Stored::f16
                   : t.type == SafetensorsType::bf16 ? Stored::bf16
                   : t.type == SafetensorsType::f8_e4m3 ? Stored::fp8
                   : packed                              ? Stored::fp4
                                                         : Stored::integer;
  if (reader.stored_ != Stored::fp8 && reader.stored_ != Stored::fp4) return reader;

  auto scale_at = locate(scale_name);
  if (!scale_at.ok()) {
    const std::string wanted = ends_with(name, k_weight_suffix)
                                   ? name.substr(0, name.size() - std::strlen(k_weight_suffix)) + k_scale_suffix + "' (V4) or '" + name + k_scale_inv_suffix
                                   : scale_name;
    return Status::error(where + " is FP8 but has no scales ('" + wanted + "')");
  }
  const SafetensorsTensor& s = *scale_at.value().tensor;
  const std::string scale_where = scale_at.value().file->path() + ": '" + scale_name + "'";
  if (t.shape.size() != 2) return Status::error(where + " is quantized but not a matrix");
  std::vector<int64_t> expected;
  if (reader.stored_ == Stored::fp4) {
    // FP4: two codes a byte; one e8m0 exponent per 32 elements of a row.
    reader.columns_ = 2 * t.shape[1];
    if (reader.columns_ % 32 != 0) return Status::error(where + ": an FP4 row of " + std::to_string(reader.columns_) + " elements is not in blocks of 32");
    expected = {reader.rows_, reader.columns_ / 32};
    if (s.shape != expected || (s.type != SafetensorsType::f8_e8m0 && s.type != SafetensorsType::u8)) {
      return Status::error(scale_where + " must be [" + std::to_string(expected[0]) + ", " + std::to_string(expected[1]) +
                           "] e8m0 exponents, one per 32 elements of FP4 '" + name + "'");
    }
  } else {
    // FP8: each [block rows x block columns] block is multiplied by its scale.
    reader.block_rows_ = fp8_block_[0];
    reader.block_columns_ = fp8_block_[1];
    expected = {(reader.rows_ + fp8_block_[0] - 1) / fp8_block_[0], (reader.columns_ + fp8_block_[1] - 1) / fp8_block_[1]};
    if (s.shape != expected || !(s.type == SafetensorsType::f8_e8m0 || (is_float(s.type) && s.type != SafetensorsType::f8_e4m3))) {
      return Status::error(scale_where + " must be [" + std::to_string(expected[0]) + ", " + std::to_string(expected[1]) + "] scales, one per " +
                           std::to_string(fp8_block_[0]) + "x" + std::to_string(fp8_block_[1]) + " block of '" + name + "'");
    }
  }
  reader.scale_file_ = scale_at.value().file;
  reader.scale_ = &s;
  return reader;
}

void HfCheckpoint::RowReader::row(int64_t r, float* out) const {
  const size_t bytes = safetensors_type_bytes(tensor_->type);
  const uint8_t* data = file_->data(*tensor_) + size_t(r * columns_) * bytes;
  for (int64_t c = 0; c < columns_; ++c) out[c] = element_f32(tensor_->type, data + size_t(c) * bytes);
  if (!scale_) return;
  // In float32, one product per element: what llama.cpp's converter computes (weight.float() * scale).
  const int64_t block_cols = scale_->shape[1];
  const size_t scale_bytes = safetensors_type_bytes(scale_->type);
  const uint8_t* scales = scale_file_->data(*scale_) + size_t((r / block_rows_) * block_cols) * scale_bytes;
  for (int64_t c = 0; c < columns_; ++c) out[c] *= element_f32(scale_->type, scales + size_t(c / block_columns_) * scale_bytes);
}

void HfCheckpoint::RowReader::mxfp4_row(int64_t r, uint8_t* out) const {
  // The source's byte i holds elements 2i (low nibble) and 2i + 1 (high); the codes are ggml's
  // e2m1 table's indices already, so only their places move.
  const uint8_t* packed = file_->data(*tensor_) + size_t(r * columns_ / 2);
  const uint8_t* scales = scale_file_->data(*scale_) + size_t(r * columns_ / 32);
  for (int64_t b = 0; b < columns_ / 32; ++b, out += 17) {
    const uint8_t* in = packed + b * 16;
    const auto code = [in](int e) { return uint8_t((in[e / 2] >> (4 * (e % 2))) & 0x0f); };
    out[0] = scales[b];
    for (int j = 0; j < 16; ++j) out[1 + j] = uint8_t(code(j) | (code(j + 16) << 4));
  }
}

void HfCheckpoint::RowReader::int32_row(int64_t r, int32_t* out) const {
  const size_t bytes = safetensors_type_bytes(tensor_->type);
  const uint8_t* data = file_->data(*tensor_) + size_t(r * columns_) * bytes;
  for (int64_t c = 0; c < columns_; ++c) {
    out[c] = int32_t(std::clamp<int64_t>(element_integer(tensor_->type, data + size_t(c) * bytes), INT32_MIN, INT32_MAX));
  }
}

void HfCheckpoint::RowReader::release_rows(int64_t end) const {
  const uint64_t row_bytes = stored_ == Stored::fp4 ? uint64_t(columns_ / 2) : uint64_t(columns_) * safetensors_type_bytes(tensor_->type);
  file_->release(*tensor_, 0, uint64_t(end) * row_bytes);
}

}  // namespace ds
