#pragma once
// Which KV pages each sequence holds, and reuse of cached prompt prefixes.
//
// A sequence's block table lists its pages in position order. Full pages are
// registered in the pool's prefix cache under a key chained from the page
// before (so a page is reused only after the same whole prefix), salted by
// the model and the tenant (so tenants never share pages). The pool itself
// knows nothing of sequences; the scheduler talks only to this class.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"

namespace ds {

class KvCacheManager {
 public:
  // With prefix_cache off no page is ever registered or looked up.
  KvCacheManager(BlockPool& pool, int32_t page_tokens, uint64_t model_salt, bool prefix_cache = true);

  int32_t page_tokens() const { return page_tokens_; }
  const BlockPool& pool() const { return pool_; }

  // How many leading tokens of a new sequence's prompt are in cached full
  // pages. At least one token is always left to compute, since the model
  // needs a position to produce logits from. No side effects.
  int32_t cached_prefix(std::span<const int32_t> tokens, uint64_t tenant_salt) const;

  // Starts a sequence: takes a reference to its cached prefix pages (unless
  // !reuse_prefix) and returns how many tokens they hold (the sequence's first computed count).
  int32_t start(int64_t seq, std::span<const int32_t> tokens, uint64_t tenant_salt, bool reuse_prefix = true);

  // Pages to allocate for the sequence to hold n_slots token slots.
  int32_t pages_needed(int64_t seq, int32_t n_slots) const;
  bool can_grow(int64_t seq, int32_t n_slots) const { return pool_.can_allocate(pages_needed(seq, n_slots)); }
  // Allocates those pages. Requires can_grow.
  void grow(int64_t seq, int32_t n_slots);

  // Registers the sequence's pages that became full now that n_computed of
  // its tokens are in the cache.
  void commit(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed);

  // Releases every page of the sequence, last page first, so that the end of
  // a prompt is evicted before its shared beginning.
  void free(int64_t seq);

  bool has(int64_t seq) const { return tables_.count(seq) > 0; }
  const std::vector<int32_t>& block_table(int64_t seq) const { return tables_.at(seq).pages; }
  int32_t n_sequences() const { return int32_t(tables_.size()); }

 private:
  struct Table {
    std::vector<int32_t> pages;
    std::vector<uint64_t> page_hashes;  // keys of the leading full pages registered so far
    uint64_t salt = 0;
  };
  uint64_t salt_for(uint64_t tenant_salt) const;
  // The cached full pages a prompt begins with, with their key hashes; leaves
  // at least the last token out.
  std::vector<std::pair<int32_t, uint64_t>> cached_pages(std::span<const int32_t> tokens, uint64_t salt) const;

  BlockPool& pool_;
  int32_t page_tokens_;
  uint64_t model_salt_;
  bool prefix_cache_;
  std::unordered_map<int64_t, Table> tables_;
};

}  // namespace ds
