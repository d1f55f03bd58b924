#include "gguf/gguf_writer.h"

#include <cstdio>
#include <cstring>

namespace ds {
namespace {

constexpr uint64_t k_alignment = 32;

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace

void GgufWriter::put_key(const std::string& key, uint32_t type) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, type);
  ++n_kv_;
}

void GgufWriter::add_uint32(const std::string& key, uint32_t value) { put_key(key, 4); put(kv_bytes_, value); }
void GgufWriter::add_float32(const std::string& key, float value) { put_key(key, 6); put(kv_bytes_, value); }
void GgufWriter::add_bool(const std::string& key, bool value) { put_key(key, 7); put<uint8_t>(kv_bytes_, value); }
void GgufWriter::add_string(const std::string& key, const std::string& value) { put_key(key, 8); put_string(kv_bytes_, value); }

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& values) {
  put_key(key, 9);
  put<uint32_t>(kv_bytes_, 8);
  put<uint64_t>(kv_bytes_, values.size());
  for (const auto& v : values) put_string(kv_bytes_, v);
}

void GgufWriter::add_float32_array(const std::string& key, const std::vector<float>& values) {
  put_key(key, 9);
  put<uint32_t>(kv_bytes_, 6);
  put<uint64_t>(kv_bytes_, values.size());
  for (float v : values) put(kv_bytes_, v);
}

void GgufWriter::add_int32_array(const std::string& key, const std::vector<int32_t>& values) {
  put_key(key, 9);
  put<uint32_t>(kv_bytes_, 5);
  put<uint64_t>(kv_bytes_, values.size());
  for (int32_t v : values) put(kv_bytes_, v);
}

void GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                            size_t n_bytes) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  tensors_.push_back(Tensor{name, type, shape, std::vector<uint8_t>(bytes, bytes + n_bytes)});
}

std::vector<uint8_t> GgufWriter::finish() const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_);
  out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, uint32_t(t.shape.size()));
    for (int64_t d : t.shape) put<uint64_t>(out, uint64_t(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (t.bytes.size() + k_alignment - 1) / k_alignment * k_alignment;
  }
  out.resize((out.size() + k_alignment - 1) / k_alignment * k_alignment, 0);
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    out.resize((out.size() + k_alignment - 1) / k_alignment * k_alignment, 0);
  }
  return out;
}

Status GgufWriter::write_file(const std::string& path) const {
  const std::vector<uint8_t> bytes = finish();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::error("cannot write '" + path + "'");
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok ? Status() : Status::error("short write to '" + path + "'");
}

}  // namespace ds
