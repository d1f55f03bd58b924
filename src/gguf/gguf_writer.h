#pragma once
// Builds a GGUF v3 image in memory: metadata first, then tensor infos, then
// aligned tensor data. Used by tests to make well-formed and crafted files.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ds {

class GgufWriter {
 public:
  void add_uint32(const std::string& key, uint32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  void add_float32_array(const std::string& key, const std::vector<float>& values);
  void add_int32_array(const std::string& key, const std::vector<int32_t>& values);
  // shape[0] is the row length; data must hold the tensor's bytes in `type`.
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                  size_t n_bytes);

  std::vector<uint8_t> finish() const;
  Status write_file(const std::string& path) const;

 private:
  void put_key(const std::string& key, uint32_t type);
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<uint8_t> kv_bytes_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace ds
