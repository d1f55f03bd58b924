#include "engine/kv_cache_manager.h"

#include "base/status.h"

namespace ds {

KvCacheManager::KvCacheManager(BlockPool& pool, int32_t page_tokens, uint64_t model_salt, bool prefix_cache)
    : pool_(pool), page_tokens_(page_tokens), model_salt_(model_salt), prefix_cache_(prefix_cache) {}

uint64_t KvCacheManager::salt_for(uint64_t tenant_salt) const {
  return model_salt_ * 0x9e3779b97f4a7c15ull + tenant_salt;
}

std::vector<std::pair<int32_t, uint64_t>> KvCacheManager::cached_pages(std::span<const int32_t> tokens,
                                                                       uint64_t salt) const {
  std::vector<std::pair<int32_t, uint64_t>> pages;
  if (!prefix_cache_) return pages;
  uint64_t parent = 0;
  // Stop one token short of the end: the last token must be computed.
  for (size_t begin = 0; begin + size_t(page_tokens_) < tokens.size(); begin += size_t(page_tokens_)) {
    const PageKey key = make_page_key(parent, tokens.subspan(begin, size_t(page_tokens_)), salt);
    const int32_t page = pool_.lookup(key);
    if (page < 0) break;
    pages.emplace_back(page, key.hash);
    parent = key.hash;
  }
  return pages;
}

int32_t KvCacheManager::cached_prefix(std::span<const int32_t> tokens, uint64_t tenant_salt) const {
  return int32_t(cached_pages(tokens, salt_for(tenant_salt)).size()) * page_tokens_;
}

int32_t KvCacheManager::start(int64_t seq, std::span<const int32_t> tokens, uint64_t tenant_salt, bool reuse_prefix) {
  DS_CHECK(!has(seq), "sequence started twice");
  Table& table = tables_[seq];
  table.salt = salt_for(tenant_salt);
  if (!reuse_prefix) return 0;
  for (const auto& [page, hash] : cached_pages(tokens, table.salt)) {
    pool_.acquire(page);
    table.pages.push_back(page);
    table.page_hashes.push_back(hash);
  }
  return int32_t(table.pages.size()) * page_tokens_;
}

int32_t KvCacheManager::pages_needed(int64_t seq, int32_t n_slots) const {
  auto it = tables_.find(seq);
  const int32_t have = it == tables_.end() ? 0 : int32_t(it->second.pages.size());
  const int32_t want = (n_slots + page_tokens_ - 1) / page_tokens_;
  return std::max(0, want - have);
}

void KvCacheManager::grow(int64_t seq, int32_t n_slots) {
  const int32_t n = pages_needed(seq, n_slots);
  Table& table = tables_[seq];
  for (int32_t page : pool_.allocate(n)) table.pages.push_back(page);
}

void KvCacheManager::commit(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed) {
  if (!prefix_cache_) return;
  Table& table = tables_.at(seq);
  const size_t n_full = size_t(n_computed / page_tokens_);
  DS_CHECK(n_full <= table.pages.size(), "computed tokens beyond the sequence's pages");
  while (table.page_hashes.size() < n_full) {
    const size_t index = table.page_hashes.size();
    const uint64_t parent = index == 0 ? 0 : table.page_hashes.back();
    PageKey key = make_page_key(parent, tokens.subspan(index * size_t(page_tokens_), size_t(page_tokens_)), table.salt);
    const uint64_t hash = key.hash;
    int32_t& page = table.pages[index];
    if (!pool_.has_key(page)) {
      const int32_t owner = pool_.cache(page, std::move(key));
      // Another sequence computed the same page first: share its page and
      // give ours back (the contents are identical).
      if (owner != page) {
        pool_.acquire(owner);
        pool_.release(page);
        page = owner;
      }
    }
    table.page_hashes.push_back(hash);
  }
}

void KvCacheManager::free(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  const std::vector<int32_t>& pages = it->second.pages;
  for (auto page = pages.rbegin(); page != pages.rend(); ++page) pool_.release(*page);
  tables_.erase(it);
}

}  // namespace ds
