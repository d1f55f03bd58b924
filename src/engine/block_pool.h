#pragma once
// Metadata of the KV page pool: reference counts, the free queue and the
// prefix cache. It knows nothing about requests (STYLE.md practice 3): a KV
// manager above it maps requests to pages; the page memory itself is
// model/kv_cache, indexed by the same page ids.
//
// A page is in exactly one of three states:
//
//     free ──allocate──► held (ref >= 1) ──release to 0──► free, or cached if it has a key
//      ▲                      ▲   │                              │
//      └──── evicted ─────────┼───┘◄──── acquire (prefix hit) ───┘
//                             cached (ref 0, key, evictable)
//
// Pages with no holder wait in one queue that allocation takes from the head
// of: plain free pages join at the head, cached pages at the tail. So a cached
// page is evicted only when no plain free page is left, least recently
// released first.

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace ds {

// The identity of a full page: a hash chained over the prefix, with the exact
// tokens and the parent kept to rule out collisions.
struct PageKey {
  uint64_t hash = 0;
  uint64_t parent_hash = 0;
  std::vector<int32_t> tokens;

  bool operator==(const PageKey& other) const = default;
};

// Chains a page's tokens onto its parent's hash. `salt` separates models and
// tenants: equal prompts under different salts never share pages.
PageKey make_page_key(uint64_t parent_hash, std::span<const int32_t> tokens, uint64_t salt);

class BlockPool {
 public:
  explicit BlockPool(int32_t n_pages);

  int32_t n_pages() const { return int32_t(ref_counts_.size()); }
  // Pages no request holds: plain free pages plus cached ones (evictable).
  int32_t n_unheld() const { return n_unheld_; }
  int32_t n_cached() const { return int32_t(cached_.size()); }
  int32_t ref_count(int32_t page) const { return ref_counts_[size_t(page)]; }
  bool has_key(int32_t page) const { return keys_[size_t(page)].hash != 0; }

  // Check, then commit (STYLE.md practice 4): can_allocate has no side effects.
  bool can_allocate(int32_t n) const { return n <= n_unheld_; }
  // Takes n unheld pages from the head of the queue, evicting cached ones
  // there; each comes back with one reference. Requires can_allocate(n).
  std::vector<int32_t> allocate(int32_t n);

  // The cached (or held) page registered under this key, or -1.
  int32_t lookup(const PageKey& key) const;
  // Adds a holder to a page found by lookup (a prefix hit).
  void acquire(int32_t page);
  // Drops one holder. A page nobody holds joins the queue: at the tail if it
  // is cached (findable through its key until evicted), else at the head.
  void release(int32_t page);
  // Registers a full, held page without a key under `key` (a page's tokens
  // never change once it is full). If another page already holds the key,
  // nothing changes and that page's id is returned; else `page`.
  int32_t cache(int32_t page, PageKey key);

  // Every page free, cached or held; queue and counts consistent.
  Status check_invariants() const;

 private:
  void queue_push_back(int32_t page);
  void queue_push_front(int32_t page);
  void queue_remove(int32_t page);
  void evict(int32_t page);

  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> prev_, next_;  // the unheld queue, intrusive; -1 ends
  std::vector<bool> queued_;
  int32_t head_ = -1, tail_ = -1;
  int32_t n_unheld_ = 0;
  std::vector<PageKey> keys_;                      // per page; hash 0 = none
  std::unordered_map<uint64_t, int32_t> cached_;   // key hash -> page
};

}  // namespace ds
