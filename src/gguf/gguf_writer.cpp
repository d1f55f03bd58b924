#include "gguf/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "base/status.h"

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

uint64_t padded(uint64_t n) { return (n + k_alignment - 1) / k_alignment * k_alignment; }

// One scalar, or an array's element type, count and elements; false for an
// element the reader cannot give back (a u64 above INT64_MAX).
bool put_value(std::vector<uint8_t>& out, GgufType type, const GgufValue& value) {
  switch (type) {
    case GgufType::u8: put<uint8_t>(out, uint8_t(std::get<uint64_t>(value.data))); return true;
    case GgufType::u16: put<uint16_t>(out, uint16_t(std::get<uint64_t>(value.data))); return true;
    case GgufType::u32: put<uint32_t>(out, uint32_t(std::get<uint64_t>(value.data))); return true;
    case GgufType::u64: put<uint64_t>(out, std::get<uint64_t>(value.data)); return true;
    case GgufType::i8: put<int8_t>(out, int8_t(std::get<int64_t>(value.data))); return true;
    case GgufType::i16: put<int16_t>(out, int16_t(std::get<int64_t>(value.data))); return true;
    case GgufType::i32: put<int32_t>(out, int32_t(std::get<int64_t>(value.data))); return true;
    case GgufType::i64: put<int64_t>(out, std::get<int64_t>(value.data)); return true;
    case GgufType::f32: put<float>(out, float(std::get<double>(value.data))); return true;
    case GgufType::f64: put<double>(out, std::get<double>(value.data)); return true;
    case GgufType::boolean: put<uint8_t>(out, std::get<bool>(value.data)); return true;
    case GgufType::string: put_string(out, std::get<std::string>(value.data)); return true;
    case GgufType::array: {
      const GgufArray& a = std::get<GgufArray>(value.data);
      put<uint32_t>(out, static_cast<uint32_t>(a.element_type()));
      put<uint64_t>(out, a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        GgufValue element{a.element_type(), uint64_t(0)};
        switch (a.element_type()) {
          case GgufType::u8: case GgufType::u16: case GgufType::u32: case GgufType::u64:
            if (!a.integer(i)) return false;
            element.data = uint64_t(*a.integer(i));
            break;
          case GgufType::i8: case GgufType::i16: case GgufType::i32: case GgufType::i64:
            element.data = *a.integer(i);
            break;
          case GgufType::f32: case GgufType::f64: element.data = *a.real(i); break;
          case GgufType::boolean: element.data = *a.boolean(i); break;
          case GgufType::string: element.data = std::string(*a.string(i)); break;
          case GgufType::array: DS_CHECK(false, "the reader refuses arrays of arrays");
        }
        if (!put_value(out, a.element_type(), element)) return false;
      }
      return true;
    }
  }
  return false;
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

Status GgufWriter::add_value(const std::string& key, const GgufValue& value) {
  std::vector<uint8_t> bytes;
  if (!put_value(bytes, value.type, value)) return Status::error("metadata '" + key + "': a u64 element above 2^63 cannot be copied");
  put_key(key, static_cast<uint32_t>(value.type));
  kv_bytes_.insert(kv_bytes_.end(), bytes.begin(), bytes.end());
  return Status();
}

void GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                            size_t n_bytes) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  tensors_.push_back(Tensor{name, type, shape, n_bytes, false, std::vector<uint8_t>(bytes, bytes + n_bytes)});
}

void GgufWriter::declare_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape) {
  uint64_t n_bytes = uint64_t(row_bytes(type, shape.at(0)));
  for (size_t d = 1; d < shape.size(); ++d) n_bytes *= uint64_t(shape[d]);
  tensors_.push_back(Tensor{name, type, shape, n_bytes, true, {}});
}

std::vector<uint8_t> GgufWriter::header() const {
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
    offset += padded(t.n_bytes);
  }
  out.resize(padded(out.size()), 0);
  return out;
}

std::vector<uint8_t> GgufWriter::finish() const {
  std::vector<uint8_t> out = header();
  for (const Tensor& t : tensors_) {
    DS_CHECK(!t.declared, "finish() writes tensors given with their bytes only");
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    out.resize(padded(out.size()), 0);
  }
  return out;
}

Status GgufWriter::write_file(const std::string& path, const TensorProducer& produce) const {
  const std::string partial = path + ".partial";
  FILE* f = std::fopen(partial.c_str(), "wb");
  if (!f) return Status::error("cannot write '" + partial + "'");
  auto write = [&](const std::vector<uint8_t>& bytes, uint64_t padding) {
    static const uint8_t zeros[k_alignment] = {};
    return std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() &&
           std::fwrite(zeros, 1, padding, f) == padding;
  };
  Status status;
  if (!write(header(), 0)) status = Status::error("short write to '" + partial + "'");
  std::vector<uint8_t> produced;
  for (size_t i = 0; i < tensors_.size() && status.ok(); ++i) {
    const Tensor& t = tensors_[i];
    if (t.declared) {
      DS_CHECK(produce != nullptr, "declared tensors need a producer");
      produced.clear();
      status = produce(i, produced);
      if (status.ok() && produced.size() != t.n_bytes)
        status = Status::error("tensor '" + t.name + "': produced " + std::to_string(produced.size()) + " bytes, declared " +
                               std::to_string(t.n_bytes));
      if (!status.ok()) break;
    }
    if (!write(t.declared ? produced : t.bytes, padded(t.n_bytes) - t.n_bytes))
      status = Status::error("short write to '" + partial + "' (disk full?)");
  }
  if (std::fclose(f) != 0 && status.ok()) status = Status::error("cannot finish writing '" + partial + "'");
  if (status.ok() && std::rename(partial.c_str(), path.c_str()) != 0) status = Status::error("cannot rename '" + partial + "' to '" + path + "'");
  if (!status.ok()) std::remove(partial.c_str());
  return status;
}

}  // namespace ds
