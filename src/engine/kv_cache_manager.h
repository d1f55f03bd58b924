#pragma once
// Which KV pages each sequence holds, and reuse of cached prompt prefixes.
//
// A sequence's block table lists its pages in position order. Full pages are
// registered in the pool's prefix cache under a key chained from the page
// before (so a page is reused only after the same whole prefix), salted by
// the model and the tenant (so tenants never share pages). The pool itself
// knows nothing of sequences; the scheduler talks only to this class.
//
// A family with windowed streams (KvStream::windowed: a sliding window's raw
// rows, a compressor's state) keeps them in window pages, from a pool of
// their own, beside its block table's pages: a sequence holds the window
// page of a block only while the block reaches into the horizon before its
// next token, then lets it go (into the window pool's cache, under the
// page's key, until evicted). A cached prefix is reused up to a page only if
// the window pages of its horizon are still cached: the prefix hit is cut
// back to the longest prefix whose are (as vLLM's sliding-window layers).
//
// With a disk tier (kv_disk_tier.h), each full page is written to it when it
// is registered (with its window page, which is complete by then: a block's
// windowed rows are its own positions'), and a prompt's prefix goes on from
// the pool's hit into the tier: those pages (and window pages) are read back
// into fresh ones, registered and held as pool hits are; the window pages
// behind the new hit's horizon then go into the window pool's cache.

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"

namespace ds {

class KvDiskTier;

// The disk tier and how a page's bytes move between it and the KV memory: a
// tier file holds a page's bytes, then (a family with windowed streams) its window page's.
struct KvTierLink {
  KvDiskTier* disk = nullptr;
  std::function<void(int32_t page, uint8_t* host)> read_page;
  std::function<void(int32_t page, const uint8_t* host)> write_page;
  int64_t page_bytes = 0;
  std::function<void(int32_t window_page, uint8_t* host)> read_window_page;
  std::function<void(int32_t window_page, const uint8_t* host)> write_window_page;
  int64_t window_page_bytes = 0;
};

class KvCacheManager {
 public:
  // With prefix_cache off no page is ever registered or looked up.
  // window_pool: the window pages, for a horizon of `horizon` tokens
  // (KvRowShape::horizon); null for a family without windowed streams.
  KvCacheManager(BlockPool& pool, int32_t page_tokens, uint64_t model_salt, bool prefix_cache = true, BlockPool* window_pool = nullptr,
                 int32_t horizon = 0);

  // With a window pool, the link must move window pages too.
  void attach_tier(KvTierLink tier);

  int32_t page_tokens() const { return page_tokens_; }
  const BlockPool& pool() const { return pool_; }
  const BlockPool* window_pool() const { return window_pool_; }

  // How many leading tokens of a new sequence's prompt are in cached full
  // pages, the pool's or the disk tier's. At least one token is always left
  // to compute, since the model needs a position to produce logits from.
  // No side effects.
  int32_t cached_prefix(std::span<const int32_t> tokens, uint64_t tenant_salt) const;

  // Starts a sequence: takes a reference to its cached prefix pages (unless
  // !reuse_prefix), reading the tier's into free pages while there are any,
  // and returns how many tokens they hold (the sequence's first computed count).
  int32_t start(int64_t seq, std::span<const int32_t> tokens, uint64_t tenant_salt, bool reuse_prefix = true);

  // Pages to allocate for the sequence to hold n_slots token slots, and
  // window pages for those of them from the horizon of its next token on.
  int32_t pages_needed(int64_t seq, int32_t n_slots) const;
  int32_t window_pages_needed(int64_t seq, int32_t n_slots) const;
  bool can_grow(int64_t seq, int32_t n_slots) const;
  int32_t horizon() const { return horizon_; }
  // Allocates those pages. Requires can_grow.
  void grow(int64_t seq, int32_t n_slots);

  // Registers the sequence's pages that became full now that n_computed of
  // its tokens are in the cache; lets go of the window pages behind the
  // horizon of its next token.
  void commit(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed);

  // Releases every page of the sequence, last page first, so that the end of
  // a prompt is evicted before its shared beginning.
  void free(int64_t seq);

  bool has(int64_t seq) const { return tables_.count(seq) > 0; }
  const std::vector<int32_t>& block_table(int64_t seq) const { return tables_.at(seq).pages; }
  // Parallel to the block table: each block's window page, -1 where let go.
  const std::vector<int32_t>& window_table(int64_t seq) const { return tables_.at(seq).window_pages; }
  int32_t n_sequences() const { return int32_t(tables_.size()); }

 private:
  struct Table {
    std::vector<int32_t> pages;
    std::vector<int32_t> window_pages;  // with a window pool
    std::vector<uint64_t> page_hashes;  // keys of the leading full pages registered so far
    int32_t n_computed = 0;
    uint64_t salt = 0;
  };
  struct CachedPage {
    int32_t page = -1, window_page = -1;  // window_page: -1 where the hit does not need it
    PageKey key;
  };
  uint64_t salt_for(uint64_t tenant_salt) const;
  // The first block whose window page a sequence with n_computed tokens
  // still reads (blocks before it are behind the horizon of its next token).
  int32_t first_window_block(int32_t n_computed) const;
  // The cached full pages a prompt begins with, with their keys and the window
  // pages of the hit's horizon; leaves at least the last token out.
  std::vector<CachedPage> cached_pages(std::span<const int32_t> tokens, uint64_t salt) const;
  // The keys of the tier's pages that go on from `after` (the pool's hit), within the prompt's full pages but its last token.
  std::vector<PageKey> tier_pages(std::span<const int32_t> tokens, uint64_t salt, size_t after, uint64_t parent) const;
  // Writes a newly registered page (and its window page) to the tier.
  void write_to_tier(int32_t page, int32_t window_page, const PageKey& key);
  // Registers `page` of `pool` under key; where another page holds the key already, holds
  // that one instead and gives `page` back (the contents are identical).
  static void share(BlockPool& pool, const PageKey& key, int32_t& page);
  // Lets the window pages behind the horizon of the table's next token go (into the window pool's cache).
  void let_go_behind_horizon(Table& table);

  BlockPool& pool_;
  int32_t page_tokens_;
  uint64_t model_salt_;
  bool prefix_cache_;
  BlockPool* window_pool_;
  int32_t horizon_;
  KvTierLink tier_;
  std::vector<uint8_t> tier_buffer_;  // one page's bytes on their way from the tier
  std::unordered_map<int64_t, Table> tables_;
};

}  // namespace ds
