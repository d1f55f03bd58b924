#pragma once
// Writes a GGUF v3 file: metadata first, then tensor infos, then aligned
// tensor data. Tests build crafted files in memory; `dsinfer quantize` declares
// its tensors and produces their bytes one at a time while the file is
// written, so that a model never has to fit in memory twice.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
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
  // A value read from another file, with its exact type.
  Status add_value(const std::string& key, const GgufValue& value);
  // shape[0] is the row length; data must hold the tensor's bytes in `type`.
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                  size_t n_bytes);

  // A tensor whose bytes write_file's producer gives (row_bytes(type, shape[0]) per row).
  void declare_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape);

  std::vector<uint8_t> finish() const;  // tensors added with their bytes only
  // Fills `bytes` with declared tensor `index`'s data (exactly its size).
  using TensorProducer = std::function<Status(size_t index, std::vector<uint8_t>& bytes)>;
  // Writes to a temporary name beside `path` and renames it when complete, so
  // that no reader ever sees a partial file.
  Status write_file(const std::string& path, const TensorProducer& produce = nullptr) const;

 private:
  void put_key(const std::string& key, uint32_t type);
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    uint64_t n_bytes;
    bool declared;  // bytes from the producer
    std::vector<uint8_t> bytes;
  };
  std::vector<uint8_t> header() const;  // through the padding before the first tensor
  std::vector<uint8_t> kv_bytes_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace ds
