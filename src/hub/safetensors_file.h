#pragma once
// A bounds-checked reader of one .safetensors file over a read-only mapping:
// an 8-byte little-endian header length, a JSON header (each tensor's dtype,
// shape and [begin, end) byte offsets into the data that follows), the data.
// Every offset, shape and size is checked against the file and the dtype
// before use; a bad file is an error naming the file and the tensor.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

// f8_e8m0: a power of two as a biased exponent byte (DeepSeek-V4's scales).
enum class SafetensorsType { f64, f32, f16, bf16, f8_e4m3, f8_e5m2, f8_e8m0, i64, i32, i16, i8, u8, boolean };
size_t safetensors_type_bytes(SafetensorsType type);
const char* safetensors_type_name(SafetensorsType type);

struct SafetensorsTensor {
  std::string name;
  SafetensorsType type = SafetensorsType::f32;
  std::vector<int64_t> shape;  // outermost first, as PyTorch's
  uint64_t begin = 0, end = 0;  // within the data section
  int64_t n_elements() const;
};

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  const uint8_t* data(const SafetensorsTensor& tensor) const { return base_ + data_offset_ + tensor.begin; }
  // Drops the pages wholly inside the tensor's bytes [begin, end) from this
  // process once they are converted (the page cache keeps them), so that a
  // conversion's memory stays near its output tensor.
  void release(const SafetensorsTensor& tensor, uint64_t begin, uint64_t end) const;

 private:
  SafetensorsFile() = default;
  Status parse();
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace ds
