#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "base/status.h"
#include "engine/kv_disk_tier.h"

namespace ds {

KvCacheManager::KvCacheManager(BlockPool& pool, int32_t page_tokens, uint64_t model_salt, bool prefix_cache, BlockPool* window_pool,
                               int32_t horizon)
    : pool_(pool),
      page_tokens_(page_tokens),
      model_salt_(model_salt),
      prefix_cache_(prefix_cache),
      window_pool_(window_pool),
      horizon_(horizon) {}

uint64_t KvCacheManager::salt_for(uint64_t tenant_salt) const {
  return model_salt_ * 0x9e3779b97f4a7c15ull + tenant_salt;
}

int32_t KvCacheManager::first_window_block(int32_t n_computed) const {
  return std::max(0, n_computed - horizon_) / page_tokens_;
}

std::vector<KvCacheManager::CachedPage> KvCacheManager::cached_pages(std::span<const int32_t> tokens, uint64_t salt) const {
  std::vector<CachedPage> pages;
  if (!prefix_cache_) return pages;
  uint64_t parent = 0;
  // Stop one token short of the end: the last token must be computed.
  for (size_t begin = 0; begin + size_t(page_tokens_) < tokens.size(); begin += size_t(page_tokens_)) {
    PageKey key = make_page_key(parent, tokens.subspan(begin, size_t(page_tokens_)), salt);
    const int32_t page = pool_.lookup(key);
    if (page < 0) break;
    parent = key.hash;
    pages.push_back({page, -1, std::move(key)});
  }
  if (!window_pool_) return pages;
  // The longest hit whose horizon's window pages are all cached.
  size_t n = pages.size();
  for (; n > 0; --n) {
    const int32_t first = first_window_block(int32_t(n) * page_tokens_);
    bool complete = true;
    for (size_t b = size_t(first); b < n && complete; ++b) {
      pages[b].window_page = window_pool_->lookup(pages[b].key);
      complete = pages[b].window_page >= 0;
    }
    if (complete) break;
  }
  pages.resize(n);
  const int32_t first = first_window_block(int32_t(n) * page_tokens_);
  for (size_t b = 0; b < size_t(first) && b < n; ++b) pages[b].window_page = -1;
  return pages;
}

void KvCacheManager::attach_tier(KvTierLink tier) {
  DS_CHECK(!window_pool_ || (tier.read_window_page && tier.write_window_page && tier.window_page_bytes > 0),
           "a disk tier for windowed streams must move window pages");
  tier_ = std::move(tier);
  tier_buffer_.resize(size_t(tier_.page_bytes + (window_pool_ ? tier_.window_page_bytes : 0)));
}

std::vector<PageKey> KvCacheManager::tier_pages(std::span<const int32_t> tokens, uint64_t salt, size_t after, uint64_t parent) const {
  std::vector<PageKey> keys;
  if (!tier_.disk || !prefix_cache_) return keys;
  for (size_t begin = after * size_t(page_tokens_); begin + size_t(page_tokens_) < tokens.size(); begin += size_t(page_tokens_)) {
    PageKey key = make_page_key(parent, tokens.subspan(begin, size_t(page_tokens_)), salt);
    if (!tier_.disk->contains(key)) break;
    parent = key.hash;
    keys.push_back(std::move(key));
  }
  return keys;
}

void KvCacheManager::write_to_tier(int32_t page, int32_t window_page, const PageKey& key) {
  if (!tier_.disk || (window_pool_ && window_page < 0)) return;
  tier_.disk->write(key, [&](uint8_t* payload) {
    tier_.read_page(page, payload);
    if (window_pool_) tier_.read_window_page(window_page, payload + tier_.page_bytes);
  });
}

void KvCacheManager::share(BlockPool& pool, const PageKey& key, int32_t& page) {
  if (page < 0 || pool.has_key(page)) return;
  const int32_t owner = pool.cache(page, key);
  if (owner != page) {
    pool.acquire(owner);
    pool.release(page);
    page = owner;
  }
}

void KvCacheManager::let_go_behind_horizon(Table& table) {
  if (!window_pool_) return;
  const size_t first = std::min(size_t(first_window_block(table.n_computed)), table.window_pages.size());
  for (size_t b = 0; b < first; ++b) {
    if (table.window_pages[b] < 0) continue;
    window_pool_->release(table.window_pages[b]);
    table.window_pages[b] = -1;
  }
}

int32_t KvCacheManager::cached_prefix(std::span<const int32_t> tokens, uint64_t tenant_salt) const {
  const uint64_t salt = salt_for(tenant_salt);
  const std::vector<CachedPage> pages = cached_pages(tokens, salt);
  const size_t on_disk = tier_pages(tokens, salt, pages.size(), pages.empty() ? 0 : pages.back().key.hash).size();
  return int32_t(pages.size() + on_disk) * page_tokens_;
}

int32_t KvCacheManager::start(int64_t seq, std::span<const int32_t> tokens, uint64_t tenant_salt, bool reuse_prefix) {
  DS_CHECK(!has(seq), "sequence started twice");
  Table& table = tables_[seq];
  table.salt = salt_for(tenant_salt);
  if (!reuse_prefix) return 0;
  for (const CachedPage& hit : cached_pages(tokens, table.salt)) {
    pool_.acquire(hit.page);
    table.pages.push_back(hit.page);
    table.page_hashes.push_back(hit.key.hash);
    if (window_pool_) {
      if (hit.window_page >= 0) window_pool_->acquire(hit.window_page);
      table.window_pages.push_back(hit.window_page);
    }
  }
  // Then the tier's pages, read into free pages (a page that fails its checks ends the hit there).
  const uint64_t parent = table.page_hashes.empty() ? 0 : table.page_hashes.back();
  for (PageKey& key : tier_pages(tokens, table.salt, table.pages.size(), parent)) {
    if (!pool_.can_allocate(1) || (window_pool_ && !window_pool_->can_allocate(1)) || !tier_.disk->read(key, tier_buffer_.data())) break;
    int32_t page = pool_.allocate(1)[0];
    tier_.write_page(page, tier_buffer_.data());
    share(pool_, key, page);
    table.pages.push_back(page);
    if (window_pool_) {
      int32_t window_page = window_pool_->allocate(1)[0];
      tier_.write_window_page(window_page, tier_buffer_.data() + tier_.page_bytes);
      share(*window_pool_, key, window_page);
      table.window_pages.push_back(window_page);
    }
    table.page_hashes.push_back(key.hash);
  }
  // A lookup that went past the pool and stopped short of the prompt's full pages.
  if (tier_.disk && prefix_cache_ && (tokens.size() - 1) / size_t(page_tokens_) > table.pages.size()) tier_.disk->note_miss();
  table.n_computed = int32_t(table.pages.size()) * page_tokens_;
  let_go_behind_horizon(table);
  return table.n_computed;
}

int32_t KvCacheManager::pages_needed(int64_t seq, int32_t n_slots) const {
  auto it = tables_.find(seq);
  const int32_t have = it == tables_.end() ? 0 : int32_t(it->second.pages.size());
  const int32_t want = (n_slots + page_tokens_ - 1) / page_tokens_;
  return std::max(0, want - have);
}

int32_t KvCacheManager::window_pages_needed(int64_t seq, int32_t n_slots) const {
  if (!window_pool_) return 0;
  auto it = tables_.find(seq);
  const Table empty;
  const Table& table = it == tables_.end() ? empty : it->second;
  const int32_t want = (n_slots + page_tokens_ - 1) / page_tokens_;
  int32_t needed = 0;
  for (int32_t b = first_window_block(table.n_computed); b < want; ++b) {
    needed += size_t(b) >= table.window_pages.size() || table.window_pages[size_t(b)] < 0;
  }
  return needed;
}

bool KvCacheManager::can_grow(int64_t seq, int32_t n_slots) const {
  return pool_.can_allocate(pages_needed(seq, n_slots)) && (!window_pool_ || window_pool_->can_allocate(window_pages_needed(seq, n_slots)));
}

void KvCacheManager::grow(int64_t seq, int32_t n_slots) {
  const int32_t n = pages_needed(seq, n_slots), n_window = window_pages_needed(seq, n_slots);
  Table& table = tables_[seq];
  for (int32_t page : pool_.allocate(n)) table.pages.push_back(page);
  if (!window_pool_) return;
  table.window_pages.resize(table.pages.size(), -1);
  const std::vector<int32_t> fresh = window_pool_->allocate(n_window);
  auto next = fresh.begin();
  for (size_t b = size_t(first_window_block(table.n_computed)); b < table.window_pages.size(); ++b) {
    if (table.window_pages[b] < 0) table.window_pages[b] = *next++;
  }
}

void KvCacheManager::commit(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed) {
  Table& table = tables_.at(seq);
  table.n_computed = n_computed;
  const size_t n_full = size_t(n_computed / page_tokens_);
  DS_CHECK(n_full <= table.pages.size(), "computed tokens beyond the sequence's pages");
  while (prefix_cache_ && table.page_hashes.size() < n_full) {
    const size_t index = table.page_hashes.size();
    const uint64_t parent = index == 0 ? 0 : table.page_hashes.back();
    PageKey key = make_page_key(parent, tokens.subspan(index * size_t(page_tokens_), size_t(page_tokens_)), table.salt);
    // Another sequence computed the same page first: share its page and give
    // ours back (the contents are identical). The same for its window page.
    const int32_t ours = table.pages[index];
    const bool fresh = !pool_.has_key(ours);
    share(pool_, key, table.pages[index]);
    const int32_t window_page = window_pool_ ? table.window_pages[index] : -1;
    if (fresh && table.pages[index] == ours) write_to_tier(ours, window_page, key);  // registered now, not shared
    if (window_pool_) share(*window_pool_, key, table.window_pages[index]);
    table.page_hashes.push_back(key.hash);
  }
  // Behind the horizon: into the window pool's cache (or free, unkeyed).
  let_go_behind_horizon(table);
}

void KvCacheManager::free(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  const Table& table = it->second;
  for (auto page = table.pages.rbegin(); page != table.pages.rend(); ++page) pool_.release(*page);
  for (auto page = table.window_pages.rbegin(); page != table.window_pages.rend(); ++page) {
    if (*page >= 0) window_pool_->release(*page);
  }
  tables_.erase(it);
}

}  // namespace ds
