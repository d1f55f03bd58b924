#pragma once
// A bounds-checked reader for GGUF v2/v3 files over a read-only memory mapping.
//
// Every length, count, offset, dimension and type is validated against the
// file size and sane limits before it is used; a bad file yields an error that
// names the field and its byte offset. Tensor data stays in the mapping: the
// pointers returned by tensor_data() live as long as the GgufFile.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ds {

enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
const char* gguf_type_name(GgufType type);

// An array value, kept compact so that memory stays within a small multiple
// of the file's bytes whatever a file claims: fixed-width elements are read
// from the file's bytes when asked for, strings are views into the file.
// Arrays of arrays are refused at parse (no model metadata uses them).
class GgufArray {
 public:
  GgufArray(GgufType element_type, size_t count, const uint8_t* data, std::vector<std::string_view> strings)
      : element_type_(element_type), count_(count), data_(data), strings_(std::move(strings)) {}
  GgufType element_type() const { return element_type_; }
  size_t size() const { return count_; }
  // Element i as an integer, for integer arrays (a u64 above INT64_MAX: nullopt).
  std::optional<int64_t> integer(size_t i) const;
  // Element i of an f32 or f64 array.
  std::optional<double> real(size_t i) const;
  // Element i of a string array (valid as long as the file).
  std::optional<std::string_view> string(size_t i) const;
  // Element i of a bool array.
  std::optional<bool> boolean(size_t i) const;

 private:
  GgufType element_type_;
  size_t count_;
  const uint8_t* data_;  // fixed-width elements, little-endian, unaligned
  std::vector<std::string_view> strings_;
};

// One metadata value. Integers keep their signedness; the typed getters on
// GgufFile convert between widths where the value fits.
struct GgufValue {
  GgufType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> data;
};

constexpr int k_max_dims = 4;

struct GgufTensorInfo {
  std::string name;
  int n_dims = 0;
  int64_t ne[k_max_dims] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  DType type = DType::f32;
  uint64_t offset = 0;  // relative to the data section
  uint32_t part = 0;    // of a split model: which file holds the data (0: the first)
  uint64_t n_bytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
 public:
  // Maps the file read-only. The first part of a split model
  // (PREFIX-00001-of-0000N.gguf, as llama.cpp's gguf-split writes it: its
  // metadata in the first, split.count in every one) maps all its parts,
  // and their tensors are found as one model's.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (tests, fuzzing).
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  size_t file_bytes() const;  // of every part
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // Every lookup is remembered (present or not), so that `dsinfer info
  // --keys-read` can list what the loaders read and tests can craft each.
  const GgufValue* find(std::string_view key) const;
  std::vector<std::string> keys_looked_up() const;

  // Typed getters: an error names the key when it is missing or of another type.
  Result<uint64_t> get_uint(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<const GgufArray*> get_array(std::string_view key) const;
  // Getters with a default for keys that may be absent (a present key of the
  // wrong type is still an error).
  Result<uint64_t> get_uint_or(std::string_view key, uint64_t fallback) const;
  Result<double> get_float_or(std::string_view key, double fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  Result<std::string> get_string_or(std::string_view key, const std::string& fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const GgufTensorInfo& info) const {
    const GgufFile& f = info.part == 0 ? *this : *parts_[info.part - 1];
    return f.base_ + f.data_offset_ + info.offset;
  }
  // Drops the mapping's resident pages wholly inside the tensor, once a copy
  // serves instead (the page cache keeps them; a later read maps them again).
  void release_tensor_pages(const GgufTensorInfo& info) const;

 private:
  GgufFile() = default;
  static Result<std::unique_ptr<GgufFile>> open_one(const std::string& path);
  Status parse_all();
  // The other parts of a split model, their tensors added to this one's.
  Status open_parts();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  std::vector<std::unique_ptr<GgufFile>> parts_;  // a split model's second part on
  mutable std::mutex lookups_mutex_;
  mutable std::set<std::string, std::less<>> lookups_;
};

// Printable form of a value (arrays abbreviated), for `dsinfer info`.
std::string gguf_value_to_string(const GgufValue& value, size_t max_items = 8);

}  // namespace ds
