#include "hub/file_digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

namespace ds {

FileDigest::FileDigest(Kind kind, int64_t size) : context_(EVP_MD_CTX_new()) {
  auto* ctx = static_cast<EVP_MD_CTX*>(context_);
  EVP_DigestInit_ex(ctx, kind == Kind::sha256 ? EVP_sha256() : EVP_sha1(), nullptr);
  if (kind == Kind::git_blob_sha1) {
    const std::string prefix = "blob " + std::to_string(size);
    EVP_DigestUpdate(ctx, prefix.data(), prefix.size() + 1);  // with its terminating NUL
  }
}

FileDigest::~FileDigest() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(context_)); }

void FileDigest::update(const void* data, size_t n) { EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(context_), data, n); }

std::string FileDigest::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(context_), digest, &n);
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    char pair[3];
    std::snprintf(pair, sizeof pair, "%02x", digest[i]);
    out += pair;
  }
  return out;
}

Result<FileDigest::Kind> FileDigest::kind_of(const std::string& expected) {
  const bool hex = !expected.empty() && std::all_of(expected.begin(), expected.end(), [](unsigned char c) { return std::isxdigit(c); });
  if (hex && expected.size() == 64) return Kind::sha256;
  if (hex && expected.size() == 40) return Kind::git_blob_sha1;
  return Status::error("'" + expected + "' is neither a SHA-256 nor a git blob hash");
}

Status FileDigest::update_from_file(const std::string& path, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::error(path + ": " + std::strerror(errno));
  std::vector<char> buffer(size_t(1) << 20);
  while (bytes > 0) {
    const ssize_t got = ::read(fd, buffer.data(), size_t(std::min<int64_t>(bytes, int64_t(buffer.size()))));
    if (got <= 0) {
      ::close(fd);
      return Status::error(path + ": shorter than expected");
    }
    update(buffer.data(), size_t(got));
    bytes -= got;
  }
  ::close(fd);
  return Status();
}

}  // namespace ds
