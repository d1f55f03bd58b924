#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <regex>
#include <limits>

namespace ds {
namespace {

constexpr uint32_t k_magic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t k_max_string_bytes = 1ull << 30;
constexpr uint64_t k_max_alignment = 1ull << 20;
// Far beyond any real file (a few dozen keys, a few thousand tensors); each
// entry costs ~10x its smallest encoding in memory, so counts are capped.
constexpr uint64_t k_max_metadata_keys = 1ull << 16;
constexpr uint64_t k_max_tensors = 1ull << 20;

std::string hex_offset(size_t offset) { return std::to_string(offset); }

// A cursor over the file bytes; every read checks the remaining length.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return size_ - offset_; }

  template <typename T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T)) {
      return Status::error(std::string("gguf: truncated file reading ") + what + " at offset " +
                           hex_offset(offset_) + " (file is " + std::to_string(size_) + " bytes)");
    }
    std::memcpy(out, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return Status();
  }

  const uint8_t* here() const { return data_ + offset_; }

  Status skip(uint64_t n, const char* what) {
    if (n > remaining()) {
      return Status::error(std::string("gguf: truncated file reading ") + what + " at offset " + hex_offset(offset_));
    }
    offset_ += size_t(n);
    return Status();
  }

  Status read_string(std::string* out, const std::string& what) {
    std::string_view view;
    DS_RETURN_IF_ERROR(read_string_view(&view, what));
    out->assign(view);
    return Status();
  }

  Status read_string_view(std::string_view* out, const std::string& what) {
    const size_t at = offset_;
    uint64_t length = 0;
    DS_RETURN_IF_ERROR(read(&length, what.c_str()));
    if (length > remaining() || length > k_max_string_bytes) {
      return Status::error("gguf: " + what + " at offset " + hex_offset(at) + " has length " +
                           std::to_string(length) + ", past the end of the file (" +
                           std::to_string(remaining()) + " bytes left)");
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + offset_), length);
    offset_ += length;
    return Status();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

// Smallest encoded size of one value of a type, so that counts can be checked
// against the bytes left before anything is allocated.
uint64_t min_encoded_bytes(GgufType type) {
  switch (type) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    case GgufType::string: return 8;
    case GgufType::array: return 12;
  }
  return 1;
}

bool valid_type(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufType::f64); }

Status read_value(Cursor& cursor, GgufType type, const std::string& what, GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufType::u8: { uint8_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = uint64_t(v); return Status(); }
    case GgufType::i8: { int8_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = int64_t(v); return Status(); }
    case GgufType::u16: { uint16_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = uint64_t(v); return Status(); }
    case GgufType::i16: { int16_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = int64_t(v); return Status(); }
    case GgufType::u32: { uint32_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = uint64_t(v); return Status(); }
    case GgufType::i32: { int32_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = int64_t(v); return Status(); }
    case GgufType::u64: { uint64_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = v; return Status(); }
    case GgufType::i64: { int64_t v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = v; return Status(); }
    case GgufType::f32: { float v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = double(v); return Status(); }
    case GgufType::f64: { double v; DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str())); out->data = v; return Status(); }
    case GgufType::boolean: {
      const size_t at = cursor.offset();
      uint8_t v;
      DS_RETURN_IF_ERROR(cursor.read(&v, what.c_str()));
      if (v > 1) return Status::error("gguf: " + what + " at offset " + hex_offset(at) + " is a bool with value " + std::to_string(v));
      out->data = v != 0;
      return Status();
    }
    case GgufType::string: {
      std::string s;
      DS_RETURN_IF_ERROR(cursor.read_string(&s, what));
      out->data = std::move(s);
      return Status();
    }
    case GgufType::array: {
      const size_t at = cursor.offset();
      uint32_t raw_element_type = 0;
      uint64_t count = 0;
      DS_RETURN_IF_ERROR(cursor.read(&raw_element_type, what.c_str()));
      DS_RETURN_IF_ERROR(cursor.read(&count, what.c_str()));
      if (!valid_type(raw_element_type)) {
        return Status::error("gguf: " + what + " at offset " + hex_offset(at) + " has unknown element type " + std::to_string(raw_element_type));
      }
      const GgufType element_type = static_cast<GgufType>(raw_element_type);
      if (element_type == GgufType::array) {
        return Status::error("gguf: " + what + " at offset " + hex_offset(at) + " is an array of arrays, which dsinfer does not read");
      }
      if (count > cursor.remaining() / min_encoded_bytes(element_type)) {
        return Status::error("gguf: " + what + " at offset " + hex_offset(at) + " claims " + std::to_string(count) +
                             " elements, more than the " + std::to_string(cursor.remaining()) + " bytes left can hold");
      }
      const uint8_t* data = cursor.here();
      std::vector<std::string_view> strings;
      if (element_type == GgufType::string) {
        strings.reserve(count);
        for (uint64_t i = 0; i < count; ++i) {
          std::string_view s;
          DS_RETURN_IF_ERROR(cursor.read_string_view(&s, what));
          strings.push_back(s);
        }
      } else {
        const uint64_t bytes = count * min_encoded_bytes(element_type);
        if (element_type == GgufType::boolean) {
          for (uint64_t i = 0; i < count; ++i) {
            if (data[i] > 1) return Status::error("gguf: " + what + " element " + std::to_string(i) + " is a bool with value " + std::to_string(data[i]));
          }
        }
        DS_RETURN_IF_ERROR(cursor.skip(bytes, what.c_str()));
      }
      out->data = GgufArray(element_type, size_t(count), data, std::move(strings));
      return Status();
    }
  }
  return Status::error("gguf: " + what + ": unknown value type");
}

bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
  }
  return "?";
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  auto file = open_one(path);
  if (!file.ok()) return file.status();
  DS_RETURN_IF_ERROR(file.value()->open_parts());
  return file;
}

Status GgufFile::open_parts() {
  if (!find("split.count")) return Status();
  auto count = get_uint("split.count");
  auto number = get_uint_or("split.no", 0);
  if (!count.ok()) return count.status();
  if (!number.ok()) return number.status();
  if (count.value() <= 1) return Status();
  if (count.value() > 9999) return Status::error("gguf: split.count " + std::to_string(count.value()) + " in '" + path_ + "' is not a number of files");
  if (number.value() != 0) {
    return Status::error("gguf: '" + path_ + "' is part " + std::to_string(number.value() + 1) + " of a split model: open its first part");
  }
  static const std::regex pattern(R"((.*)-00001-of-(\d{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path_, m, pattern) || std::stoull(m[2].str()) != count.value()) {
    return Status::error("gguf: '" + path_ + "' is the first of a split model's " + std::to_string(count.value()) +
                         " parts, whose names must be PREFIX-0000K-of-0000N.gguf");
  }
  for (uint64_t k = 1; k < count.value(); ++k) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "-%05llu-of-%05llu.gguf", (unsigned long long)k + 1, (unsigned long long)count.value());
    auto part = open_one(m[1].str() + suffix);
    if (!part.ok()) return Status::error("split model: " + part.message());
    GgufFile& p = *part.value();
    const auto p_count = p.get_uint("split.count"), p_number = p.get_uint("split.no");
    if (!p_count.ok() || !p_number.ok() || p_count.value() != count.value() || p_number.value() != k) {
      return Status::error("gguf: '" + p.path_ + "' is not part " + std::to_string(k + 1) + " of " + std::to_string(count.value()) +
                           " (its split.no and split.count say otherwise)");
    }
    for (GgufTensorInfo info : p.tensors_) {
      info.part = uint32_t(parts_.size() + 1);
      if (!tensor_index_.emplace(info.name, tensors_.size()).second) {
        return Status::error("gguf: tensor '" + info.name + "' is in two parts of the split model (again in '" + p.path_ + "')");
      }
      tensors_.push_back(std::move(info));
    }
    parts_.push_back(part.take());
  }
  auto expected = get_uint_or("split.tensors.count", tensors_.size());
  if (!expected.ok()) return expected.status();
  if (expected.value() != tensors_.size()) {
    return Status::error("gguf: the split model's parts hold " + std::to_string(tensors_.size()) + " tensors, split.tensors.count says " +
                         std::to_string(expected.value()));
  }
  return Status();
}

size_t GgufFile::file_bytes() const {
  size_t bytes = size_;
  for (const auto& p : parts_) bytes += p->size_;
  return bytes;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open_one(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error("cannot open model file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("model file '" + path + "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Status::error("gguf: model file '" + path + "' is empty");
  }
  void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return Status::error("cannot map model file '" + path + "': " + std::strerror(errno));

  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->base_ = static_cast<const uint8_t*>(mapping);
  file->size_ = size;
  file->mapped_ = true;
  Status status = file->parse_all();
  if (!status.ok()) return Status::error(status.message() + " (in '" + path + "')");
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = "<memory>";
  file->base_ = data;
  file->size_ = size;
  DS_RETURN_IF_ERROR(file->parse_all());
  return file;
}

void GgufFile::release_tensor_pages(const GgufTensorInfo& info) const {
  if (info.part != 0) {
    GgufTensorInfo local = info;
    local.part = 0;
    parts_[info.part - 1]->release_tensor_pages(local);
    return;
  }
  if (!mapped_) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(tensor_data(info)) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(tensor_data(info)) + info.n_bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

GgufFile::~GgufFile() {
  if (mapped_) munmap(const_cast<uint8_t*>(base_), size_);
}

Status GgufFile::parse_all() {
  Cursor cursor(base_, size_);
  uint32_t magic = 0;
  DS_RETURN_IF_ERROR(cursor.read(&magic, "magic"));
  if (magic != k_magic) return Status::error("gguf: bad magic at offset 0: not a GGUF file");
  DS_RETURN_IF_ERROR(cursor.read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    return Status::error("gguf: unsupported version " + std::to_string(version_) + " at offset 4 (dsinfer reads v2 and v3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  DS_RETURN_IF_ERROR(cursor.read(&n_tensors, "tensor count"));
  DS_RETURN_IF_ERROR(cursor.read(&n_kv, "metadata count"));
  // A key-value pair takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8.
  if (n_kv > cursor.remaining() / 13 || n_kv > k_max_metadata_keys) {
    return Status::error("gguf: metadata count " + std::to_string(n_kv) + " at offset 16 is more than the file can hold (or than " +
                         std::to_string(k_max_metadata_keys) + ")");
  }
  if (n_tensors > cursor.remaining() / 32 || n_tensors > k_max_tensors) {
    return Status::error("gguf: tensor count " + std::to_string(n_tensors) + " at offset 8 is more than the file can hold (or than " +
                         std::to_string(k_max_tensors) + ")");
  }

  metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = cursor.offset();
    std::string key;
    DS_RETURN_IF_ERROR(cursor.read_string(&key, "metadata key #" + std::to_string(i)));
    uint32_t raw_type = 0;
    DS_RETURN_IF_ERROR(cursor.read(&raw_type, "metadata type"));
    if (!valid_type(raw_type)) {
      return Status::error("gguf: metadata '" + key + "' at offset " + hex_offset(at) + " has unknown type " + std::to_string(raw_type));
    }
    GgufValue value;
    DS_RETURN_IF_ERROR(read_value(cursor, static_cast<GgufType>(raw_type), "metadata '" + key + "'", &value));
    if (!metadata_index_.emplace(key, metadata_.size()).second) {
      return Status::error("gguf: duplicate metadata key '" + key + "' at offset " + hex_offset(at));
    }
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* align = find("general.alignment")) {
    const uint64_t* value = std::get_if<uint64_t>(&align->data);
    if (value == nullptr || *value == 0 || *value > k_max_alignment || (*value & (*value - 1)) != 0) {
      return Status::error("gguf: general.alignment must be an unsigned power of two up to 1 MiB");
    }
    alignment_ = *value;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const size_t at = cursor.offset();
    GgufTensorInfo info;
    DS_RETURN_IF_ERROR(cursor.read_string(&info.name, "tensor name #" + std::to_string(i)));
    const std::string what = "tensor '" + info.name + "' (info at offset " + hex_offset(at) + ")";
    uint32_t n_dims = 0;
    DS_RETURN_IF_ERROR(cursor.read(&n_dims, "tensor dimension count"));
    if (n_dims == 0 || n_dims > k_max_dims) {
      return Status::error("gguf: " + what + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    info.n_dims = static_cast<int>(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      DS_RETURN_IF_ERROR(cursor.read(&dim, "tensor dimension"));
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()) || !checked_mul(n_elements, int64_t(dim), &n_elements)) {
        return Status::error("gguf: " + what + " dimension " + std::to_string(d) + " = " + std::to_string(dim) + " is zero or overflows");
      }
      info.ne[d] = int64_t(dim);
    }
    uint32_t raw_type = 0;
    DS_RETURN_IF_ERROR(cursor.read(&raw_type, "tensor type"));
    const auto traits = dtype_traits(raw_type);
    if (!traits) return Status::error("gguf: " + what + " has unknown type id " + std::to_string(raw_type));
    info.type = static_cast<DType>(raw_type);
    if (info.ne[0] % traits->block_elements != 0) {
      return Status::error("gguf: " + what + " row of " + std::to_string(info.ne[0]) + " elements is not a multiple of the " +
                           traits->name + " block size " + std::to_string(traits->block_elements));
    }
    int64_t n_bytes = 0;
    if (!checked_mul(n_elements / traits->block_elements, traits->block_bytes, &n_bytes)) {
      return Status::error("gguf: " + what + " byte size overflows");
    }
    info.n_bytes = uint64_t(n_bytes);
    DS_RETURN_IF_ERROR(cursor.read(&info.offset, "tensor offset"));
    if (info.offset % alignment_ != 0) {
      return Status::error("gguf: " + what + " data offset " + std::to_string(info.offset) + " is not aligned to " + std::to_string(alignment_));
    }
    if (!tensor_index_.emplace(info.name, tensors_.size()).second) {
      return Status::error("gguf: duplicate tensor name '" + info.name + "' at offset " + hex_offset(at));
    }
    tensors_.push_back(std::move(info));
  }

  data_offset_ = (cursor.offset() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_bytes = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (const GgufTensorInfo& info : tensors_) {
    if (info.offset > data_bytes || info.n_bytes > data_bytes - info.offset) {
      return Status::error("gguf: tensor '" + info.name + "' data [" + std::to_string(data_offset_ + info.offset) + ", +" +
                           std::to_string(info.n_bytes) + ") lies past the end of the file (" + std::to_string(size_) + " bytes)");
    }
  }
  return Status();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  {
    std::lock_guard lock(lookups_mutex_);
    if (lookups_.find(key) == lookups_.end()) lookups_.emplace(key);
  }
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::vector<std::string> GgufFile::keys_looked_up() const {
  std::lock_guard lock(lookups_mutex_);
  return {lookups_.begin(), lookups_.end()};
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
Status wrong_type(std::string_view key, const GgufValue& value, const char* wanted) {
  return Status::error("gguf: metadata '" + std::string(key) + "' is " + gguf_type_name(value.type) + ", expected " + wanted);
}
Status missing(std::string_view key) { return Status::error("gguf: required metadata '" + std::string(key) + "' is missing"); }
}  // namespace

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value) return missing(key);
  if (auto u = std::get_if<uint64_t>(&value->data)) return *u;
  if (auto i = std::get_if<int64_t>(&value->data); i && *i >= 0) return uint64_t(*i);
  return wrong_type(key, *value, "a non-negative integer");
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value) return missing(key);
  if (auto f = std::get_if<double>(&value->data)) return *f;
  return wrong_type(key, *value, "a float");
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value) return missing(key);
  if (auto b = std::get_if<bool>(&value->data)) return *b;
  return wrong_type(key, *value, "a bool");
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value) return missing(key);
  if (auto s = std::get_if<std::string>(&value->data)) return *s;
  return wrong_type(key, *value, "a string");
}

Result<const GgufArray*> GgufFile::get_array(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value) return missing(key);
  if (auto a = std::get_if<GgufArray>(&value->data)) return a;
  return wrong_type(key, *value, "an array");
}

Result<uint64_t> GgufFile::get_uint_or(std::string_view key, uint64_t fallback) const {
  return find(key) ? get_uint(key) : Result<uint64_t>(fallback);
}
Result<double> GgufFile::get_float_or(std::string_view key, double fallback) const {
  return find(key) ? get_float(key) : Result<double>(fallback);
}
Result<bool> GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  return find(key) ? get_bool(key) : Result<bool>(fallback);
}
Result<std::string> GgufFile::get_string_or(std::string_view key, const std::string& fallback) const {
  return find(key) ? get_string(key) : Result<std::string>(fallback);
}

namespace {
template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

std::optional<int64_t> GgufArray::integer(size_t i) const {
  if (i >= count_) return std::nullopt;
  switch (element_type_) {
    case GgufType::u8: return int64_t(data_[i]);
    case GgufType::i8: return int64_t(load_le<int8_t>(data_ + i));
    case GgufType::u16: return int64_t(load_le<uint16_t>(data_ + 2 * i));
    case GgufType::i16: return int64_t(load_le<int16_t>(data_ + 2 * i));
    case GgufType::u32: return int64_t(load_le<uint32_t>(data_ + 4 * i));
    case GgufType::i32: return int64_t(load_le<int32_t>(data_ + 4 * i));
    case GgufType::i64: return load_le<int64_t>(data_ + 8 * i);
    case GgufType::u64: {
      const uint64_t v = load_le<uint64_t>(data_ + 8 * i);
      if (v > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return int64_t(v);
    }
    case GgufType::f32: case GgufType::f64: case GgufType::boolean: case GgufType::string: case GgufType::array: break;
  }
  return std::nullopt;
}

std::optional<double> GgufArray::real(size_t i) const {
  if (i >= count_) return std::nullopt;
  if (element_type_ == GgufType::f32) return double(load_le<float>(data_ + 4 * i));
  if (element_type_ == GgufType::f64) return load_le<double>(data_ + 8 * i);
  return std::nullopt;
}

std::optional<std::string_view> GgufArray::string(size_t i) const {
  if (element_type_ != GgufType::string || i >= count_) return std::nullopt;
  return strings_[i];
}

std::optional<bool> GgufArray::boolean(size_t i) const {
  if (element_type_ != GgufType::boolean || i >= count_) return std::nullopt;
  return data_[i] != 0;
}

std::string gguf_value_to_string(const GgufValue& value, size_t max_items) {
  struct Printer {
    size_t max_items;
    std::string operator()(uint64_t v) const { return std::to_string(v); }
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return std::to_string(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const {
      return "\"" + (v.size() > 60 ? v.substr(0, 60) + "..." : v) + "\"";
    }
    std::string operator()(const GgufArray& a) const {
      std::string out = "[";
      for (size_t i = 0; i < a.size() && i < max_items; ++i) {
        if (i) out += ", ";
        if (auto v = a.integer(i)) out += std::to_string(*v);
        else if (auto f = a.real(i)) out += std::to_string(*f);
        else if (auto b = a.boolean(i)) out += *b ? "true" : "false";
        else if (auto s = a.string(i)) out += (*this)(std::string(s->substr(0, 61)));
        else out += "?";
      }
      if (a.size() > max_items) out += ", ... (" + std::to_string(a.size()) + " items)";
      return out + "]";
    }
  };
  return std::visit(Printer{max_items}, value.data);
}

}  // namespace ds
