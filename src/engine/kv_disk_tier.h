#pragma once
// The prefix cache's disk tier: full KV pages in files under a directory,
// found by the page's key (its hash chained over the prefix, salted by model
// and tenant) and a fingerprint of everything the page's bytes depend on
// (weights, architecture, KV dtype, page size, backend numerics), so that
// another model or setting never reads a page it did not write. It outlives
// the pool and the process: after a restart the index is rebuilt from the
// file names, and a long prompt's pages are read back instead of recomputed.
//
// A page file: a header (magic, fingerprint, key, parent key, the page's
// tokens, the payload's size, checksums of header and payload), then the
// payload. Written by a background thread under a temporary name, then
// linked to its name: one writer per page (the first link wins), and a
// reader never sees half a page. A torn, truncated, foreign or corrupted
// file is detected on reading, counted, removed and recomputed, never used.
//
// Bounded: the directory holds at most max_bytes (least recently used files
// go first, files of other fingerprints among them; instances sharing it
// list it again every few seconds while writing, so they keep to it together); pages queue for writing
// up to max_queued_bytes and are dropped beyond it. A disk that is full,
// read-only or failing stops the writes (a log line, a metric), never a request.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/block_pool.h"

namespace ds {

struct KvDiskTierOptions {
  std::string dir;
  int64_t max_bytes = 0;
  uint64_t fingerprint = 0;
  int64_t page_bytes = 0;     // a page's payload
  int32_t page_tokens = 0;
  int64_t max_queued_bytes = int64_t(256) << 20;  // pages waiting to be written
  // How often a writer lists the directory again, to count the files other
  // instances sharing it wrote or removed (at least 50x the listing's time).
  std::chrono::milliseconds rescan_every{2000};
};

struct KvDiskTierStats {
  int64_t hits = 0, misses = 0;            // pages read back; lookups that found no page
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t pages_written = 0, pages_dropped = 0, pages_evicted = 0;
  int64_t corrupt = 0;                     // files that failed a check (removed, recomputed)
  int64_t files = 0, bytes = 0;            // in the directory, as this instance knows it
  int64_t foreign_files = 0;               // of them, another model's or setting's at the start (never read; evicted first as the oldest)
  bool writes_disabled = false;            // a full, read-only or failing disk
};

class KvDiskTier {
 public:
  // Opens (creating) the directory and rebuilds the index from its file names.
  static Result<std::unique_ptr<KvDiskTier>> open(const KvDiskTierOptions& options);
  ~KvDiskTier();  // writes what is queued, then stops

  // Whether a page of this key is on disk (as far as its name says).
  bool contains(const PageKey& key);
  // The page's payload into `out` (page_bytes), checked; false when absent or
  // when the file fails a check (then counted and removed).
  bool read(const PageKey& key, uint8_t* out);
  // Queues the page for writing: fill(out) copies its page_bytes of payload
  // into the file's buffer, and is not called when the page is dropped
  // (already on disk, the queue full, writes stopped).
  void write(const PageKey& key, const std::function<void(uint8_t* payload)>& fill);
  // Off: contains() finds nothing (hits are recomputed); pages are still written.
  void set_reads(bool on) { reads_ = on; }
  // The seconds one page's file takes to read from the disk: a probe file
  // written, synced and dropped from the page cache, then read.
  Result<double> probe_read_seconds_per_page();
  // A prefix lookup that wanted a page the tier does not have.
  void note_miss();
  // Waits until every queued page is written or dropped (tests, shutdown).
  void flush();

  KvDiskTierStats stats() const;
  const KvDiskTierOptions& options() const { return options_; }

 private:
  explicit KvDiskTier(const KvDiskTierOptions& options) : options_(options) {}
  struct File {
    std::string name;
    int64_t bytes = 0;
  };
  std::string name_of(const PageKey& key) const;
  void rescan();
  // Under the lock: the least recently used files removed until `bytes` more fit.
  void make_room(int64_t bytes);
  void work();
  // Checksums the file's bytes, then writes them under their name.
  void write_now(const std::string& name, std::vector<uint8_t>& bytes);
  // Under the lock: the index's entries.
  void remember(const std::string& name, int64_t bytes);
  void forget(const std::string& name);
  void touch(const std::string& name);
  void disable_writes(const std::string& why);

  KvDiskTierOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::list<File> lru_;  // least recently used first
  std::unordered_map<std::string, std::list<File>::iterator> index_;
  std::deque<std::pair<std::string, std::vector<uint8_t>>> queue_;
  int64_t queued_bytes_ = 0;
  bool writing_ = false, stopping_ = false;
  KvDiskTierStats stats_;
  int64_t next_temporary_ = 0;
  std::chrono::steady_clock::time_point next_rescan_{};  // the writer's
  std::atomic<bool> reads_{true};
  std::thread writer_;
};

// What a page's bytes depend on besides its tokens, hashed: the weights
// file's identity (its size and a sample of its bytes: header, metadata and
// spread-out blocks), and the settings and backend given as text.
Result<uint64_t> kv_fingerprint(const std::string& weights_path, const std::string& settings);

}  // namespace ds
