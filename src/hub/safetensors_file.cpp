#include "hub/safetensors_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace ds {
namespace {

using json = nlohmann::json;

// safetensors' own limit on a header; more is a crafted file.
constexpr uint64_t k_max_header_bytes = uint64_t(100) << 20;

struct TypeName {
  const char* name;
  SafetensorsType type;
  size_t bytes;
};
constexpr TypeName k_types[] = {
    {"F64", SafetensorsType::f64, 8},        {"F32", SafetensorsType::f32, 4}, {"F16", SafetensorsType::f16, 2},
    {"BF16", SafetensorsType::bf16, 2},      {"F8_E4M3", SafetensorsType::f8_e4m3, 1}, {"F8_E5M2", SafetensorsType::f8_e5m2, 1},
    {"F8_E8M0", SafetensorsType::f8_e8m0, 1},
    {"I64", SafetensorsType::i64, 8},        {"I32", SafetensorsType::i32, 4}, {"I16", SafetensorsType::i16, 2},
    {"I8", SafetensorsType::i8, 1},          {"U8", SafetensorsType::u8, 1},   {"BOOL", SafetensorsType::boolean, 1},
};

}  // namespace

size_t safetensors_type_bytes(SafetensorsType type) {
  for (const TypeName& t : k_types) {
    if (t.type == type) return t.bytes;
  }
  return 0;
}

const char* safetensors_type_name(SafetensorsType type) {
  for (const TypeName& t : k_types) {
    if (t.type == type) return t.name;
  }
  return "?";
}

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
    ::close(fd);
    return Status::error("safetensors '" + path + "': not a regular file of at least 8 bytes");
  }
  void* mapping = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return Status::error("cannot map '" + path + "': " + std::strerror(errno));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->base_ = static_cast<const uint8_t*>(mapping);
  file->size_ = size_t(st.st_size);
  const Status parsed = catching_exceptions("safetensors", [&]() -> Result<bool> {
    DS_RETURN_IF_ERROR(file->parse());
    return true;
  }).status();
  if (!parsed.ok()) return Status::error("safetensors '" + path + "': " + parsed.message());
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

Status SafetensorsFile::parse() {
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, base_, 8);
  if (header_bytes > k_max_header_bytes || header_bytes > size_ - 8) {
    return Status::error("its header claims " + std::to_string(header_bytes) + " bytes, more than the file's " + std::to_string(size_) +
                         " (truncated?)");
  }
  data_offset_ = 8 + header_bytes;
  const uint64_t data_bytes = size_ - data_offset_;
  const json header = json::parse(reinterpret_cast<const char*>(base_ + 8), reinterpret_cast<const char*>(base_ + data_offset_), nullptr, false);
  if (!header.is_object()) return Status::error("its header is not a JSON object (truncated or not safetensors)");
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") || !entry["shape"].is_array() ||
        !entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return Status::error(where + ": needs dtype, shape and data_offsets [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    const std::string dtype = entry["dtype"];
    const TypeName* type = nullptr;
    for (const TypeName& k : k_types) {
      if (dtype == k.name) type = &k;
    }
    if (!type) return Status::error(where + ": dtype " + dtype + " is not one dsinfer reads");
    t.type = type->type;
    uint64_t elements = 1;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40)) return Status::error(where + ": a dimension is not a size");
      elements *= d.get<uint64_t>();
      if (elements > (uint64_t(1) << 42)) return Status::error(where + ": more elements than any tensor has");
      t.shape.push_back(int64_t(d.get<uint64_t>()));
    }
    for (const json& o : entry["data_offsets"]) {
      if (!o.is_number_unsigned()) return Status::error(where + ": data_offsets must be byte offsets");
    }
    t.begin = entry["data_offsets"][0];
    t.end = entry["data_offsets"][1];
    if (t.begin > t.end || t.end > data_bytes) {
      return Status::error(where + ": its bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") lie past the data's " +
                           std::to_string(data_bytes) + " (truncated?)");
    }
    if (t.end - t.begin != elements * type->bytes) {
      return Status::error(where + ": " + std::to_string(t.end - t.begin) + " bytes for " + std::to_string(elements) + " elements of " + dtype);
    }
    tensors_.emplace(name, std::move(t));
  }
  return Status();
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::release(const SafetensorsTensor& tensor, uint64_t begin, uint64_t end) const {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (uintptr_t(data(tensor)) + begin + page - 1) / page * page;
  const uintptr_t last = (uintptr_t(data(tensor)) + std::min(end, tensor.end - tensor.begin)) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace ds
