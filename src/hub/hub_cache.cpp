#include "hub/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/file_text.h"

namespace ds {
namespace fs = std::filesystem;
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string folder_of(const std::string& repo) {
  std::string name = "models--" + repo;
  for (size_t at = name.find('/'); at != std::string::npos; at = name.find('/', at + 2)) name.replace(at, 1, "--");
  return name;
}

}  // namespace

std::string HubCache::default_root() {
  if (!env("HF_HUB_CACHE").empty()) return env("HF_HUB_CACHE");
  if (!env("HF_HOME").empty()) return env("HF_HOME") + "/hub";
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/huggingface/hub";
  return env("HOME") + "/.cache/huggingface/hub";
}

HubCache::HubCache(std::string root, const std::string& repo)
    : root_(std::move(root)), dir_(root_ + "/" + folder_of(repo)), locks_(root_ + "/.locks/" + folder_of(repo)) {}

std::optional<std::string> HubCache::commit_of(const std::string& revision) const {
  std::error_code error;
  if (revision.size() == 40 && fs::is_directory(dir_ + "/snapshots/" + revision, error)) return revision;
  const std::optional<std::string> text = read_file_text(dir_ + "/refs/" + revision);
  if (!text) return std::nullopt;
  std::string commit = *text;
  while (!commit.empty() && std::isspace((unsigned char)commit.back())) commit.pop_back();
  if (commit.empty() || !fs::is_directory(dir_ + "/snapshots/" + commit, error)) return std::nullopt;
  return commit;
}

std::vector<std::string> HubCache::snapshot_files(const std::string& commit) const {
  std::vector<std::string> files;
  std::error_code error;
  const fs::path base = dir_ + "/snapshots/" + commit;
  for (auto it = fs::recursive_directory_iterator(base, error); !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (!it->is_directory(error)) files.push_back(it->path().lexically_relative(base).string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string HubCache::snapshot_path(const std::string& commit, const std::string& file) const {
  return dir_ + "/snapshots/" + commit + "/" + file;
}
std::string HubCache::blob_path(const std::string& hash) const { return dir_ + "/blobs/" + hash; }
std::string HubCache::partial_path(const std::string& hash) const { return blob_path(hash) + ".incomplete"; }
std::string HubCache::lock_path(const std::string& hash) const { return locks_ + "/" + hash + ".lock"; }

Status HubCache::prepare() const {
  std::error_code error;
  for (const std::string& d : {dir_ + "/blobs", dir_ + "/refs", dir_ + "/snapshots", locks_}) {
    fs::create_directories(d, error);
    if (error) return Status::error("hub cache " + d + ": " + error.message());
  }
  return Status();
}

Status HubCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return Status();
  const fs::path ref = dir_ + "/refs/" + revision;
  std::error_code error;
  fs::create_directories(ref.parent_path(), error);
  const std::string temporary = ref.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << commit;
    if (!out.flush()) return Status::error("hub cache: cannot write " + temporary);
  }
  fs::rename(temporary, ref, error);
  if (error) return Status::error("hub cache: " + ref.string() + ": " + error.message());
  return Status();
}

Status HubCache::link(const std::string& commit, const std::string& file, const std::string& hash) const {
  const fs::path pointer = snapshot_path(commit, file);
  std::error_code error;
  fs::create_directories(pointer.parent_path(), error);
  if (error) return Status::error("hub cache: " + pointer.parent_path().string() + ": " + error.message());
  const fs::path target = fs::path(blob_path(hash)).lexically_relative(pointer.parent_path());
  // A new link under a temporary name, renamed over any old one: the name is never missing or half made.
  const std::string temporary = pointer.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove(temporary, error);
  fs::create_symlink(target, temporary, error);
  if (!error) fs::rename(temporary, pointer, error);
  if (error) return Status::error("hub cache: cannot link " + pointer.string() + ": " + error.message());
  return Status();
}

Result<FileLock> FileLock::acquire(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error("hub cache: cannot open the lock " + path + ": " + std::strerror(errno));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    ::close(fd);
    return Status::error("hub cache: cannot lock " + path + ": " + std::strerror(error));
  }
  return FileLock(fd);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ds
