#include "engine/kv_disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/fd_io.h"
#include "base/log.h"

namespace ds {
namespace {

constexpr char k_magic[8] = {'D', 'S', 'K', 'V', 'P', 'G', '0', '1'};
constexpr const char* k_suffix = ".kvpage";
constexpr const char* k_temporary = ".tmp-";

// The fixed part of a page file, before its tokens and payload.
struct Header {
  char magic[8];
  uint64_t fingerprint, key, parent, payload_bytes, payload_checksum;
  uint32_t n_tokens, reserved;
  uint64_t header_checksum;  // of the fields above (this one 0) and the tokens
};
static_assert(sizeof(Header) == 64);

// Four independent lanes of multiply-xorshift over 8-byte words: a few GB/s,
// and any flipped bit or torn block changes it.
uint64_t checksum64(const uint8_t* data, size_t n, uint64_t seed = 0) {
  uint64_t lane[4] = {seed ^ 0x9e3779b97f4a7c15ull, seed ^ 0xc2b2ae3d27d4eb4full, seed ^ 0x165667b19e3779f9ull, seed ^ n};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, data + i + 8 * size_t(k), 8);
      lane[k] = (lane[k] ^ w) * 0xff51afd7ed558ccdull;
      lane[k] ^= lane[k] >> 32;
    }
  }
  uint64_t h = lane[0] ^ (lane[1] * 31) ^ (lane[2] * 131) ^ (lane[3] * 1031);
  for (; i < n; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

uint64_t header_checksum(Header header, const int32_t* tokens) {
  header.header_checksum = 0;
  const uint64_t h = checksum64(reinterpret_cast<const uint8_t*>(&header), sizeof header);
  return checksum64(reinterpret_cast<const uint8_t*>(tokens), size_t(header.n_tokens) * sizeof(int32_t), h);
}

bool ends_with(const std::string& text, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return text.size() >= n && text.compare(text.size() - n, n, suffix) == 0;
}

// The failures that mean the disk takes no more writes, as opposed to one bad write.
bool disk_refuses(int error) { return error == ENOSPC || error == EROFS || error == EACCES || error == EPERM || error == EDQUOT || error == EIO; }

}  // namespace

Result<uint64_t> kv_fingerprint(const std::string& weights_path, const std::string& settings) {
  const int fd = ::open(weights_path.c_str(), O_RDONLY);
  if (fd < 0) return Status::error("kv disk tier: cannot read '" + weights_path + "': " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t size = st.st_size;
  uint64_t h = checksum64(reinterpret_cast<const uint8_t*>(&size), sizeof size);
  // The header with the metadata and tensor table, then 64 blocks spread over the rest.
  std::vector<uint8_t> block(size_t(1) << 20);
  const auto sample = [&](int64_t offset, size_t n) {
    const ssize_t got = ::pread(fd, block.data(), std::min(n, block.size()), offset);
    if (got > 0) h = checksum64(block.data(), size_t(got), h);
  };
  sample(0, block.size());
  for (int64_t k = 1; k <= 64; ++k) sample(size / 65 * k, 4096);
  ::close(fd);
  return checksum64(reinterpret_cast<const uint8_t*>(settings.data()), settings.size(), h);
}

Result<std::unique_ptr<KvDiskTier>> KvDiskTier::open(const KvDiskTierOptions& options) {
  if (options.max_bytes <= 0 || options.page_bytes <= 0 || options.page_tokens <= 0) return Status::error("kv disk tier: bad options");
  if (::mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::error("--kv-disk-dir " + options.dir + ": " + std::strerror(errno));
  }
  auto tier = std::unique_ptr<KvDiskTier>(new KvDiskTier(options));
  tier->rescan();
  {
    char ours[24];
    std::snprintf(ours, sizeof ours, "%016llx-", (unsigned long long)options.fingerprint);
    std::lock_guard lock(tier->mutex_);
    for (const auto& [name, where] : tier->index_) tier->stats_.foreign_files += name.rfind(ours, 0) != 0;
  }
  if (::access(options.dir.c_str(), W_OK) != 0) tier->disable_writes(std::string("the directory is not writable: ") + std::strerror(errno));
  tier->writer_ = std::thread([t = tier.get()] { t->work(); });
  return tier;
}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string KvDiskTier::name_of(const PageKey& key) const {
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-%016llx%s", (unsigned long long)options_.fingerprint, (unsigned long long)key.hash, k_suffix);
  return name;
}

// The files of every fingerprint, oldest use first (a file's mtime is its
// last use), become the index; then the oldest go until it is within budget.
void KvDiskTier::rescan() {
  const auto started = std::chrono::steady_clock::now();
  struct Found {
    std::string name;
    int64_t bytes;
    struct timespec used;
  };
  std::vector<Found> found;
  DIR* listing = opendir(options_.dir.c_str());
  if (!listing) return;
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    const std::string path = options_.dir + "/" + name;
    if (name.rfind(k_temporary, 0) == 0) {
      // A writer's temporary file: stale when its process is gone (killed mid-write).
      const int pid = std::atoi(name.c_str() + std::strlen(k_temporary));
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) ::unlink(path.c_str());
      continue;
    }
    struct stat st {};
    if (!ends_with(name, k_suffix) || ::stat(path.c_str(), &st) != 0) continue;
    found.push_back({name, int64_t(st.st_size), st.st_mtim});
  }
  closedir(listing);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  std::lock_guard lock(mutex_);
  lru_.clear();
  index_.clear();
  stats_.files = stats_.bytes = 0;
  for (const Found& f : found) remember(f.name, f.bytes);
  make_room(0);
  // Its cost bounded: at most a fiftieth of the writer's time goes to listing the directory.
  const auto took = std::chrono::steady_clock::now() - started;
  next_rescan_ = std::chrono::steady_clock::now() + std::max<std::chrono::steady_clock::duration>(options_.rescan_every, 50 * took);
}

void KvDiskTier::make_room(int64_t bytes) {
  while (stats_.bytes + bytes > options_.max_bytes && !lru_.empty()) {
    const std::string oldest = lru_.front().name;
    ::unlink((options_.dir + "/" + oldest).c_str());
    forget(oldest);
    ++stats_.pages_evicted;
  }
}

void KvDiskTier::remember(const std::string& name, int64_t bytes) {
  if (index_.count(name)) return;
  lru_.push_back({name, bytes});
  index_[name] = std::prev(lru_.end());
  stats_.bytes += bytes;
  ++stats_.files;
}

void KvDiskTier::forget(const std::string& name) {
  const auto it = index_.find(name);
  if (it == index_.end()) return;
  stats_.bytes -= it->second->bytes;
  --stats_.files;
  lru_.erase(it->second);
  index_.erase(it);
}

void KvDiskTier::touch(const std::string& name) {
  const auto it = index_.find(name);
  if (it != index_.end()) lru_.splice(lru_.end(), lru_, it->second);
}

void KvDiskTier::disable_writes(const std::string& why) {
  if (stats_.writes_disabled) return;
  stats_.writes_disabled = true;
  DS_LOG_WARN("kv disk tier %s: no more pages are written (%s); pages already there are still read", options_.dir.c_str(), why.c_str());
}

bool KvDiskTier::contains(const PageKey& key) {
  if (!reads_) return false;
  const std::string name = name_of(key);
  {
    std::lock_guard lock(mutex_);
    if (index_.count(name)) return true;
  }
  // Another instance sharing the directory may have written it since the scan.
  struct stat st {};
  if (::stat((options_.dir + "/" + name).c_str(), &st) != 0) return false;
  std::lock_guard lock(mutex_);
  remember(name, int64_t(st.st_size));
  return true;
}

bool KvDiskTier::read(const PageKey& key, uint8_t* out) {
  const std::string name = name_of(key), path = options_.dir + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    std::lock_guard lock(mutex_);
    forget(name);
    return false;
  }
  Header header{};
  std::vector<int32_t> tokens(key.tokens.size());
  struct stat st {};
  const size_t expected = sizeof header + tokens.size() * sizeof(int32_t) + size_t(options_.page_bytes);
  bool valid = ::fstat(fd, &st) == 0 && size_t(st.st_size) == expected && read_fully(fd, reinterpret_cast<uint8_t*>(&header), sizeof header) &&
               std::memcmp(header.magic, k_magic, sizeof k_magic) == 0 && header.fingerprint == options_.fingerprint &&
               header.key == key.hash && header.parent == key.parent_hash && header.n_tokens == tokens.size() &&
               header.payload_bytes == uint64_t(options_.page_bytes) &&
               read_fully(fd, reinterpret_cast<uint8_t*>(tokens.data()), tokens.size() * sizeof(int32_t)) && tokens == key.tokens &&
               header.header_checksum == header_checksum(header, tokens.data()) && read_fully(fd, out, size_t(options_.page_bytes)) &&
               header.payload_checksum == checksum64(out, size_t(options_.page_bytes));
  ::close(fd);
  std::lock_guard lock(mutex_);
  if (!valid) {
    ++stats_.corrupt;
    ::unlink(path.c_str());
    forget(name);
    DS_LOG_WARN("kv disk tier: page file %s failed its checks (torn, truncated, foreign or corrupted): removed, the page is recomputed",
                name.c_str());
    return false;
  }
  ++stats_.hits;
  stats_.bytes_read += int64_t(expected);
  touch(name);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // its last use, for the order after a restart
  return true;
}

void KvDiskTier::write(const PageKey& key, const std::function<void(uint8_t* payload)>& fill) {
  const std::string name = name_of(key);
  const int64_t bytes = options_.page_bytes;
  {
    std::lock_guard lock(mutex_);
    if (stats_.writes_disabled || index_.count(name)) return;
    if (queued_bytes_ + bytes > options_.max_queued_bytes) {
      ++stats_.pages_dropped;  // the disk is slower than the pages come: not queued without bound
      return;
    }
    queued_bytes_ += bytes;
  }
  // The payload is copied here, before the page is reused; the checksums are the writer's.
  Header header{};
  std::memcpy(header.magic, k_magic, sizeof k_magic);
  header.fingerprint = options_.fingerprint;
  header.key = key.hash;
  header.parent = key.parent_hash;
  header.n_tokens = uint32_t(key.tokens.size());
  header.payload_bytes = uint64_t(bytes);
  std::vector<uint8_t> file(sizeof header + key.tokens.size() * sizeof(int32_t) + size_t(bytes));
  std::memcpy(file.data(), &header, sizeof header);
  std::memcpy(file.data() + sizeof header, key.tokens.data(), key.tokens.size() * sizeof(int32_t));
  fill(file.data() + sizeof header + key.tokens.size() * sizeof(int32_t));
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(name, std::move(file));
  }
  wake_.notify_all();
}

Result<double> KvDiskTier::probe_read_seconds_per_page() {
  const int64_t pages = std::max<int64_t>(4, (int64_t(16) << 20) / options_.page_bytes);  // 16 MiB or 4 pages
  const std::string path = options_.dir + "/" + k_temporary + std::to_string(::getpid()) + "-probe";
  std::vector<uint8_t> bytes(size_t(pages * options_.page_bytes), 0x5a);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const bool written = fd >= 0 && write_fully(fd, bytes.data(), bytes.size()) && ::fsync(fd) == 0;
  const int error = errno;
  if (fd >= 0) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  if (!written) {
    ::unlink(path.c_str());
    return Status::error(std::strerror(error));
  }
  const auto started = std::chrono::steady_clock::now();
  fd = ::open(path.c_str(), O_RDONLY);
  const bool read = fd >= 0 && read_fully(fd, bytes.data(), bytes.size());
  if (fd >= 0) ::close(fd);
  ::unlink(path.c_str());
  if (!read) return Status::error("cannot read the probe file back");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / double(pages);
}

void KvDiskTier::note_miss() {
  std::lock_guard lock(mutex_);
  ++stats_.misses;
}

void KvDiskTier::flush() {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

KvDiskTierStats KvDiskTier::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void KvDiskTier::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is written
    auto [name, bytes] = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    write_now(name, bytes);
    lock.lock();
    queued_bytes_ -= options_.page_bytes;
    writing_ = false;
    drained_.notify_all();
  }
}

void KvDiskTier::write_now(const std::string& name, std::vector<uint8_t>& bytes) {
  const int64_t size = int64_t(bytes.size());
  Header header;
  std::memcpy(&header, bytes.data(), sizeof header);
  const auto* tokens = reinterpret_cast<const int32_t*>(bytes.data() + sizeof header);
  header.payload_checksum = checksum64(bytes.data() + sizeof header + header.n_tokens * sizeof(int32_t), size_t(header.payload_bytes));
  header.header_checksum = header_checksum(header, tokens);
  std::memcpy(bytes.data(), &header, sizeof header);
  // Instances sharing the directory learn each other's files, and so keep to the budget together.
  if (std::chrono::steady_clock::now() >= next_rescan_) rescan();
  {
    std::lock_guard lock(mutex_);
    if (stats_.writes_disabled || index_.count(name)) return;
    if (size > options_.max_bytes) {
      ++stats_.pages_dropped;
      return;
    }
    make_room(size);  // the least recently used files go (another model's among them)
  }
  const std::string temporary = options_.dir + "/" + k_temporary + std::to_string(::getpid()) + "-" + std::to_string(next_temporary_++);
  const std::string path = options_.dir + "/" + name;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  bool written = fd >= 0 && write_fully(fd, bytes.data(), bytes.size());
  int error = written ? 0 : errno;
  if (fd >= 0) ::close(fd);
  // link, not rename: the first writer of a page keeps it, and the name appears whole or not at all.
  if (written && ::link(temporary.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    written = false;
    error = errno;
  }
  ::unlink(temporary.c_str());
  std::lock_guard lock(mutex_);
  if (!written) {
    ++stats_.pages_dropped;
    if (disk_refuses(error)) disable_writes(std::strerror(error));
    return;
  }
  remember(name, size);
  ++stats_.pages_written;
  stats_.bytes_written += size;
}

}  // namespace ds
