#pragma once
// The hashes the hub names its files by: an LFS file's SHA-256 of its bytes,
// and a plain git file's blob SHA-1 (of "blob SIZE\0" then its bytes). A
// digest fed piece by piece, so that a download is hashed as it is written
// (and a resumed one from its partial file first).

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace ds {

class FileDigest {
 public:
  enum class Kind { sha256, git_blob_sha1 };
  // size: the whole file's, which a git blob's hash begins with.
  FileDigest(Kind kind, int64_t size);
  FileDigest(const FileDigest&) = delete;
  FileDigest& operator=(const FileDigest&) = delete;
  ~FileDigest();

  void update(const void* data, size_t n);
  std::string hex();  // lowercase; once, at the end

  // The kind of an expected hash by its length: 64 hex digits SHA-256, 40 a git blob.
  static Result<Kind> kind_of(const std::string& expected);
  // Feeds the first `bytes` of a file (a partial download's).
  Status update_from_file(const std::string& path, int64_t bytes);

 private:
  void* context_;  // EVP_MD_CTX*
};

}  // namespace ds
