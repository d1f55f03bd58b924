#pragma once
// The Hugging Face hub cache, laid out as the huggingface_hub package lays it
// out, so that files either one downloaded serve the other:
//
//   ROOT/models--OWNER--NAME/blobs/HASH              a file's bytes, named by its etag (LFS: SHA-256; else git blob SHA-1)
//   ROOT/models--OWNER--NAME/snapshots/COMMIT/FILE   a relative symlink to its blob
//   ROOT/models--OWNER--NAME/refs/REVISION           the commit a branch or tag last resolved to
//   ROOT/.locks/models--OWNER--NAME/HASH.lock        held (flock) while a blob is written
//
// ROOT: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

class HubCache {
 public:
  static std::string default_root();
  HubCache(std::string root, const std::string& repo);

  // A revision's commit: a commit present among the snapshots, or a ref's.
  std::optional<std::string> commit_of(const std::string& revision) const;
  // The files of a snapshot, relative to it, sorted.
  std::vector<std::string> snapshot_files(const std::string& commit) const;

  std::string snapshot_path(const std::string& commit, const std::string& file) const;
  std::string blob_path(const std::string& hash) const;
  // A download in progress, resumed from its size by the next pull.
  std::string partial_path(const std::string& hash) const;
  std::string lock_path(const std::string& hash) const;

  // The directories a download writes into.
  Status prepare() const;
  // Records that `revision` is `commit` (nothing when the revision is the commit).
  Status write_ref(const std::string& revision, const std::string& commit) const;
  // The snapshot's file, a relative link to the blob.
  Status link(const std::string& commit, const std::string& file, const std::string& hash) const;

 private:
  std::string root_, dir_, locks_;
};

// An exclusive flock on a path, held while the object lives (the one
// huggingface_hub takes around the same blob's download).
class FileLock {
 public:
  static Result<FileLock> acquire(const std::string& path);
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace ds
