#include "engine/block_pool.h"

namespace ds {
namespace {

// 64-bit mixing (splitmix64's finaliser): cheap and well distributed.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PageKey make_page_key(uint64_t parent_hash, std::span<const int32_t> tokens, uint64_t salt) {
  uint64_t h = mix(parent_hash ^ mix(salt + 0x9e3779b97f4a7c15ull));
  for (int32_t t : tokens) h = mix(h ^ uint64_t(uint32_t(t)));
  if (h == 0) h = 1;  // 0 marks "no key"
  return PageKey{h, parent_hash, std::vector<int32_t>(tokens.begin(), tokens.end())};
}

BlockPool::BlockPool(int32_t n_pages)
    : ref_counts_(size_t(n_pages), 0),
      prev_(size_t(n_pages), -1),
      next_(size_t(n_pages), -1),
      queued_(size_t(n_pages), false),
      keys_(size_t(n_pages)) {
  for (int32_t page = 0; page < n_pages; ++page) queue_push_back(page);
}

void BlockPool::queue_push_back(int32_t page) {
  DS_CHECK(!queued_[size_t(page)], "page queued twice");
  prev_[size_t(page)] = tail_;
  next_[size_t(page)] = -1;
  if (tail_ >= 0) next_[size_t(tail_)] = page; else head_ = page;
  tail_ = page;
  queued_[size_t(page)] = true;
  ++n_unheld_;
}

void BlockPool::queue_push_front(int32_t page) {
  DS_CHECK(!queued_[size_t(page)], "page queued twice");
  prev_[size_t(page)] = -1;
  next_[size_t(page)] = head_;
  if (head_ >= 0) prev_[size_t(head_)] = page; else tail_ = page;
  head_ = page;
  queued_[size_t(page)] = true;
  ++n_unheld_;
}

void BlockPool::queue_remove(int32_t page) {
  DS_CHECK(queued_[size_t(page)], "page not in the queue");
  const int32_t p = prev_[size_t(page)], n = next_[size_t(page)];
  if (p >= 0) next_[size_t(p)] = n; else head_ = n;
  if (n >= 0) prev_[size_t(n)] = p; else tail_ = p;
  queued_[size_t(page)] = false;
  --n_unheld_;
}

void BlockPool::evict(int32_t page) {
  PageKey& key = keys_[size_t(page)];
  if (key.hash == 0) return;
  auto it = cached_.find(key.hash);
  if (it != cached_.end() && it->second == page) cached_.erase(it);
  key = PageKey{};
}

std::vector<int32_t> BlockPool::allocate(int32_t n) {
  DS_CHECK(can_allocate(n), "allocate without can_allocate");
  std::vector<int32_t> pages;
  pages.reserve(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t page = head_;
    queue_remove(page);
    evict(page);
    ref_counts_[size_t(page)] = 1;
    pages.push_back(page);
  }
  return pages;
}

int32_t BlockPool::lookup(const PageKey& key) const {
  auto it = cached_.find(key.hash);
  if (it == cached_.end() || !(keys_[size_t(it->second)] == key)) return -1;
  return it->second;
}

void BlockPool::acquire(int32_t page) {
  if (ref_counts_[size_t(page)]++ == 0) queue_remove(page);
}

void BlockPool::release(int32_t page) {
  DS_CHECK(ref_counts_[size_t(page)] > 0, "release of a page nobody holds");
  if (--ref_counts_[size_t(page)] > 0) return;
  if (keys_[size_t(page)].hash != 0) {
    queue_push_back(page);
  } else {
    queue_push_front(page);
  }
}

int32_t BlockPool::cache(int32_t page, PageKey key) {
  DS_CHECK(ref_counts_[size_t(page)] > 0, "only held pages are registered");
  DS_CHECK(key.hash != 0, "a page key needs a hash");
  DS_CHECK(!has_key(page), "a page is registered once");
  auto [it, inserted] = cached_.emplace(key.hash, page);
  if (!inserted) return it->second;
  keys_[size_t(page)] = std::move(key);
  return page;
}

Status BlockPool::check_invariants() const {
  int32_t n_queued = 0;
  int32_t previous = -1;
  for (int32_t page = head_; page >= 0; previous = page, page = next_[size_t(page)]) {
    if (prev_[size_t(page)] != previous) return Status::error("queue links broken at page " + std::to_string(page));
    if (ref_counts_[size_t(page)] != 0) return Status::error("held page " + std::to_string(page) + " is in the free queue");
    if (++n_queued > n_pages()) return Status::error("free queue has a cycle");
  }
  if (previous != tail_) return Status::error("queue tail is wrong");
  if (n_queued != n_unheld_) return Status::error("unheld count is wrong");
  for (int32_t page = 0; page < n_pages(); ++page) {
    const int32_t ref = ref_counts_[size_t(page)];
    if (ref < 0) return Status::error("negative reference count on page " + std::to_string(page));
    if ((ref == 0) != bool(queued_[size_t(page)])) return Status::error("page " + std::to_string(page) + " is neither held nor queued");
    const uint64_t hash = keys_[size_t(page)].hash;
    if (hash != 0) {
      auto it = cached_.find(hash);
      if (it == cached_.end() || it->second != page) return Status::error("page " + std::to_string(page) + " has a key the cache does not map to it");
    }
  }
  for (const auto& [hash, page] : cached_) {
    if (keys_[size_t(page)].hash != hash) return Status::error("cache maps a key to a page without it");
  }
  return Status();
}

}  // namespace ds
