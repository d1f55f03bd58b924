#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <numeric>

#include "engine/kv_disk_tier.h"

namespace ds {
namespace {

std::vector<int32_t> prompt(int32_t n, int32_t first = 0) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// Runs a whole prompt through the manager as the engine will: start, grow,
// then commit once its KV is computed.
void compute(KvCacheManager& kv, int64_t seq, const std::vector<int32_t>& tokens, uint64_t tenant) {
  kv.start(seq, tokens, tenant);
  ASSERT_TRUE(kv.can_grow(seq, int32_t(tokens.size())));
  kv.grow(seq, int32_t(tokens.size()));
  kv.commit(seq, tokens, int32_t(tokens.size()));
}

TEST(KvCacheManager, ASharedPrefixIsReusedAndOnlyTheRestComputed) {
  BlockPool pool(400);
  KvCacheManager kv(pool, 16, /*model_salt=*/1);
  const std::vector<int32_t> first = prompt(2000);
  compute(kv, 1, first, 0);
  kv.free(1);

  std::vector<int32_t> second = prompt(2000);
  for (size_t i = 1900; i < second.size(); ++i) second[i] = 50000 + int32_t(i);  // shares 1,900 tokens
  const int32_t cached = kv.start(2, second, 0);
  EXPECT_EQ(cached, 1900 / 16 * 16);
  EXPECT_LE(2000 - cached, 16 + 100) << "recomputes at most the last page plus 100 tokens";
  kv.free(2);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(KvCacheManager, AnotherTenantGetsNoHit) {
  BlockPool pool(200);
  KvCacheManager kv(pool, 16, 1);
  const std::vector<int32_t> tokens = prompt(500);
  compute(kv, 1, tokens, /*tenant=*/11);
  kv.free(1);
  EXPECT_GT(kv.cached_prefix(tokens, 11), 0);
  EXPECT_EQ(kv.cached_prefix(tokens, 12), 0);
}

TEST(KvCacheManager, AnotherModelGetsNoHit) {
  BlockPool pool(200);
  KvCacheManager a(pool, 16, 1), b(pool, 16, 2);
  const std::vector<int32_t> tokens = prompt(100);
  compute(a, 1, tokens, 0);
  EXPECT_EQ(b.cached_prefix(tokens, 0), 0);
  a.free(1);
}

TEST(KvCacheManager, TheLastTokenIsAlwaysComputed) {
  BlockPool pool(20);
  KvCacheManager kv(pool, 4, 1);
  const std::vector<int32_t> tokens = prompt(8);  // exactly two pages
  compute(kv, 1, tokens, 0);
  kv.free(1);
  EXPECT_EQ(kv.cached_prefix(tokens, 0), 4);
}

TEST(KvCacheManager, ConcurrentHoldersShareAndFreeingLeavesPagesCached) {
  BlockPool pool(50);
  KvCacheManager kv(pool, 4, 1);
  const std::vector<int32_t> tokens = prompt(40);
  compute(kv, 1, tokens, 0);
  EXPECT_EQ(kv.start(2, tokens, 0), 36);  // while 1 still runs
  const std::vector<int32_t>& a = kv.block_table(1);
  const std::vector<int32_t>& b = kv.block_table(2);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(a[i], b[i]);
    EXPECT_EQ(pool.ref_count(a[i]), 2);
  }
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(pool.n_unheld(), 50);
  EXPECT_EQ(pool.n_cached(), 10);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(KvCacheManager, TwoSequencesComputingTheSamePageEndUpSharingIt) {
  BlockPool pool(10);
  KvCacheManager kv(pool, 4, 1);
  const std::vector<int32_t> tokens = prompt(6);
  kv.start(1, tokens, 0);
  kv.start(2, tokens, 0);  // nothing cached yet: both compute page 0
  kv.grow(1, 6);
  kv.grow(2, 6);
  kv.commit(1, tokens, 6);
  kv.commit(2, tokens, 6);
  EXPECT_EQ(kv.block_table(1)[0], kv.block_table(2)[0]);
  EXPECT_EQ(pool.ref_count(kv.block_table(1)[0]), 2);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(pool.n_unheld(), 10);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(KvCacheManager, GrowthIsCheckedBeforeItIsCommitted) {
  BlockPool pool(3);
  KvCacheManager kv(pool, 4, 1);
  kv.start(1, prompt(10), 0);
  EXPECT_EQ(kv.pages_needed(1, 10), 3);
  EXPECT_TRUE(kv.can_grow(1, 12));
  EXPECT_FALSE(kv.can_grow(1, 13));
  EXPECT_EQ(pool.n_unheld(), 3);  // can_grow changed nothing
  kv.grow(1, 12);
  EXPECT_EQ(pool.n_unheld(), 0);
  kv.free(1);
}

// Window pages (a horizon of 10 positions, pages of 4): a sequence holds only
// those from the page where the horizon of its next token starts; the rest go
// to the window pool's cache under their page's key.
TEST(KvCacheManager, WindowPagesAreLetGoBehindTheHorizon) {
  BlockPool pool(20), windows(20);
  KvCacheManager kv(pool, 4, 1, true, &windows, 10);
  const std::vector<int32_t> tokens = prompt(30);
  kv.start(1, tokens, 0);
  EXPECT_EQ(kv.window_pages_needed(1, 30), 8);
  kv.grow(1, 30);
  kv.commit(1, tokens, 30);
  // The next token, 30, reads back to position 20: page 5 on.
  const std::vector<int32_t>& window = kv.window_table(1);
  ASSERT_EQ(window.size(), 8u);
  for (size_t b = 0; b < window.size(); ++b) EXPECT_EQ(window[b] >= 0, b >= 5) << b;
  EXPECT_EQ(windows.n_pages() - windows.n_unheld(), 3);
  EXPECT_EQ(windows.n_cached(), 7) << "the full pages' window pages, held or not";
  // Growing by a decode step takes a window page only for the new page.
  EXPECT_EQ(kv.window_pages_needed(1, 31), 0);
  EXPECT_EQ(kv.window_pages_needed(1, 33), 1);
  kv.free(1);
  EXPECT_EQ(windows.n_unheld(), 20);
  EXPECT_TRUE(windows.check_invariants().ok());
  EXPECT_TRUE(pool.check_invariants().ok());
}

// A prefix is reused up to a page only while the window pages of the horizon
// before it are cached: with one evicted, the hit is cut back to a page whose
// horizon lies behind it.
TEST(KvCacheManager, APrefixHitNeedsTheWindowPagesOfItsHorizon) {
  BlockPool pool(40), windows(12);
  KvCacheManager kv(pool, 4, 1, true, &windows, 6);
  const std::vector<int32_t> first = prompt(40);
  compute(kv, 1, first, 0);
  kv.free(1);
  std::vector<int32_t> second = first;
  second.push_back(99);  // shares all 40 tokens: a hit of 10 pages, its horizon pages 8 and 9 (positions 34..39)
  EXPECT_EQ(kv.cached_prefix(second, 0), 40);
  const int32_t hit = kv.start(2, second, 0);
  EXPECT_EQ(hit, 40);
  const std::vector<int32_t>& window = kv.window_table(2);
  for (size_t b = 0; b < window.size(); ++b) EXPECT_EQ(window[b] >= 0, b >= 8) << b;
  kv.free(2);

  // Another prompt takes every window page: the cached ones are evicted, the
  // least recently released (the first prompt's first pages) first.
  const std::vector<int32_t> other = prompt(44, 1000);
  kv.start(3, other, 0);
  ASSERT_TRUE(kv.can_grow(3, 44));
  kv.grow(3, 44);
  kv.commit(3, other, 40);  // all but its last page's window pages let go, into the cache
  kv.free(3);
  // Of the first prompt's window pages, the most recently released (its last
  // pages) may remain; a hit must have every page of its horizon.
  const int32_t cut = kv.cached_prefix(second, 0);
  EXPECT_LT(cut, 40);
  EXPECT_EQ(cut % 4, 0);
  const int32_t again = kv.start(4, second, 0);
  EXPECT_EQ(again, cut);
  const std::vector<int32_t>& cut_window = kv.window_table(4);
  for (size_t b = 0; b < cut_window.size(); ++b) EXPECT_EQ(cut_window[b] >= 0, int32_t(b) >= std::max(0, cut - 6) / 4) << b;
  kv.free(4);
  EXPECT_TRUE(windows.check_invariants().ok());
}

// KV memory on the host for the tier's tests: each page and window page a few bytes.
struct HostKv {
  static constexpr int64_t k_page_bytes = 8, k_window_bytes = 16;
  std::vector<std::vector<uint8_t>> pages, windows;
  HostKv(int32_t n_pages, int32_t n_windows)
      : pages(size_t(n_pages), std::vector<uint8_t>(k_page_bytes)), windows(size_t(n_windows), std::vector<uint8_t>(k_window_bytes)) {}
  KvTierLink link(KvDiskTier* tier) {
    return {tier,
            [this](int32_t p, uint8_t* host) { std::copy(pages[size_t(p)].begin(), pages[size_t(p)].end(), host); },
            [this](int32_t p, const uint8_t* host) { std::copy(host, host + k_page_bytes, pages[size_t(p)].begin()); },
            k_page_bytes,
            [this](int32_t w, uint8_t* host) { std::copy(windows[size_t(w)].begin(), windows[size_t(w)].end(), host); },
            [this](int32_t w, const uint8_t* host) { std::copy(host, host + k_window_bytes, windows[size_t(w)].begin()); },
            k_window_bytes};
  }
};

// A family with windowed streams through the disk tier: each block's window page goes to disk with its
// page, and after a restart a hit reads back the pages and, for the blocks of its horizon, their window
// pages, byte for byte; the window pages behind the horizon go into the window pool's cache.
TEST(KvCacheManager, TheDiskTierCarriesWindowPages) {
  char name[] = "/tmp/kv_cache_manager_test_XXXXXX";
  const std::string dir = mkdtemp(name);
  KvDiskTierOptions options;
  options.dir = dir;
  options.max_bytes = int64_t(1) << 20;
  options.fingerprint = 5;
  options.page_bytes = HostKv::k_page_bytes + HostKv::k_window_bytes;
  options.page_tokens = 4;
  const std::vector<int32_t> tokens = prompt(41);  // 10 full pages and a token
  {
    auto tier = KvDiskTier::open(options).take();
    BlockPool pool(20), windows(20);
    HostKv memory(20, 20);
    KvCacheManager kv(pool, 4, 1, true, &windows, 6);
    kv.attach_tier(memory.link(tier.get()));
    kv.start(1, tokens, 0);
    kv.grow(1, 41);
    // The "computation": block b's page and window page hold bytes of b.
    for (size_t b = 0; b < kv.block_table(1).size(); ++b) {
      std::fill(memory.pages[size_t(kv.block_table(1)[b])].begin(), memory.pages[size_t(kv.block_table(1)[b])].end(), uint8_t(b));
      std::fill(memory.windows[size_t(kv.window_table(1)[b])].begin(), memory.windows[size_t(kv.window_table(1)[b])].end(), uint8_t(100 + b));
    }
    kv.commit(1, tokens, 41);
    tier->flush();
    EXPECT_EQ(tier->stats().pages_written, 10);
    kv.free(1);
  }
  auto tier = KvDiskTier::open(options).take();
  BlockPool pool(20), windows(20);
  HostKv memory(20, 20);
  KvCacheManager kv(pool, 4, 1, true, &windows, 6);
  kv.attach_tier(memory.link(tier.get()));
  EXPECT_EQ(kv.cached_prefix(tokens, 0), 40);
  ASSERT_EQ(kv.start(2, tokens, 0), 40);
  const std::vector<int32_t>& table = kv.block_table(2);
  const std::vector<int32_t>& window = kv.window_table(2);
  ASSERT_EQ(table.size(), 10u);
  ASSERT_EQ(window.size(), 10u);
  for (size_t b = 0; b < 10; ++b) {
    EXPECT_EQ(memory.pages[size_t(table[b])], std::vector<uint8_t>(HostKv::k_page_bytes, uint8_t(b))) << b;
    // The next token, 40, reads back to position 34: blocks 8 and 9.
    ASSERT_EQ(window[b] >= 0, b >= 8) << b;
    if (window[b] >= 0) {
      EXPECT_EQ(memory.windows[size_t(window[b])], std::vector<uint8_t>(HostKv::k_window_bytes, uint8_t(100 + b))) << b;
    }
  }
  EXPECT_EQ(windows.n_cached(), 10) << "every block's window page, held or let go into the cache";
  kv.free(2);
  EXPECT_TRUE(windows.check_invariants().ok());
  EXPECT_TRUE(pool.check_invariants().ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ds
