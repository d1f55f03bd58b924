// The page pool on its own: allocation, reference counts, the prefix cache,
// eviction order, and its invariants under a long random workload.

#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ds {
namespace {

PageKey key_for(uint64_t parent, std::vector<int32_t> tokens, uint64_t salt = 7) {
  return make_page_key(parent, tokens, salt);
}

TEST(PageKey, ChainsThePrefixAndSeparatesSalts) {
  const PageKey a = key_for(0, {1, 2, 3});
  EXPECT_EQ(a, key_for(0, {1, 2, 3}));
  EXPECT_NE(a.hash, key_for(0, {1, 2, 4}).hash);
  EXPECT_NE(a.hash, key_for(a.hash, {1, 2, 3}).hash);       // same tokens, other prefix
  EXPECT_NE(a.hash, key_for(0, {1, 2, 3}, /*salt=*/8).hash);  // other tenant or model
  EXPECT_NE(a.hash, 0u);
}

TEST(BlockPool, AllocatesAndReleases) {
  BlockPool pool(4);
  EXPECT_TRUE(pool.can_allocate(4));
  EXPECT_FALSE(pool.can_allocate(5));
  std::vector<int32_t> pages = pool.allocate(3);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pool.n_unheld(), 1);
  for (int32_t p : pages) EXPECT_EQ(pool.ref_count(p), 1);
  EXPECT_FALSE(pool.can_allocate(2));
  for (int32_t p : pages) pool.release(p);
  EXPECT_EQ(pool.n_unheld(), 4);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, CachedPagesAreFoundSharedAndEvictedLast) {
  BlockPool pool(3);
  const std::vector<int32_t> pages = pool.allocate(2);
  const PageKey key = key_for(0, {5, 6});
  EXPECT_EQ(pool.cache(pages[0], key), pages[0]);
  EXPECT_EQ(pool.lookup(key), pages[0]);
  pool.acquire(pages[0]);  // a second request shares the prefix page
  EXPECT_EQ(pool.ref_count(pages[0]), 2);
  pool.release(pages[0]);
  pool.release(pages[0]);
  pool.release(pages[1]);
  EXPECT_EQ(pool.n_cached(), 1);
  EXPECT_EQ(pool.lookup(key), pages[0]);  // still findable with no holder
  // Two allocations come from the plain free pages; the cached page survives.
  std::vector<int32_t> fresh = pool.allocate(2);
  EXPECT_EQ(std::count(fresh.begin(), fresh.end(), pages[0]), 0);
  EXPECT_EQ(pool.lookup(key), pages[0]);
  // The third has to evict it.
  std::vector<int32_t> last = pool.allocate(1);
  EXPECT_EQ(last[0], pages[0]);
  EXPECT_EQ(pool.lookup(key), -1);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, AHitRevivesACachedPageFromTheQueue) {
  BlockPool pool(2);
  const int32_t page = pool.allocate(1)[0];
  const PageKey key = key_for(0, {1});
  pool.cache(page, key);
  pool.release(page);
  EXPECT_EQ(pool.n_unheld(), 2);
  pool.acquire(pool.lookup(key));
  EXPECT_EQ(pool.n_unheld(), 1);
  EXPECT_EQ(pool.ref_count(page), 1);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, DuplicateKeysKeepTheFirstPage) {
  BlockPool pool(2);
  const std::vector<int32_t> pages = pool.allocate(2);
  const PageKey key = key_for(0, {9});
  EXPECT_EQ(pool.cache(pages[0], key), pages[0]);
  EXPECT_EQ(pool.cache(pages[1], key), pages[0]);
  EXPECT_EQ(pool.n_cached(), 1);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, LookupRejectsAHashCollisionWithOtherTokens) {
  BlockPool pool(1);
  const int32_t page = pool.allocate(1)[0];
  PageKey key = key_for(0, {1, 2});
  pool.cache(page, key);
  PageKey forged = key;
  forged.tokens = {3, 4};  // same hash, different content
  EXPECT_EQ(pool.lookup(forged), -1);
}

// Thousands of random operations against a model of who holds what; the
// invariants and the model's counts are checked after every step.
TEST(BlockPool, RandomWorkloadKeepsEveryPageAccountedFor) {
  constexpr int32_t k_pages = 32;
  BlockPool pool(k_pages);
  std::mt19937 rng(2026);
  std::vector<std::vector<int32_t>> holders;  // each: the pages one "request" holds
  std::vector<PageKey> known_keys;
  for (int step = 0; step < 20000; ++step) {
    const int action = int(rng() % 4);
    if (action == 0) {
      const int32_t n = 1 + int32_t(rng() % 6);
      if (pool.can_allocate(n)) holders.push_back(pool.allocate(n));
    } else if (action == 1 && !holders.empty()) {
      const size_t h = rng() % holders.size();
      for (int32_t p : holders[h]) pool.release(p);
      holders.erase(holders.begin() + int64_t(h));
    } else if (action == 2 && !holders.empty()) {
      auto& pages = holders[rng() % holders.size()];
      const int32_t page = pages[rng() % pages.size()];
      if (pool.has_key(page)) continue;
      PageKey key = key_for(0, {int32_t(rng() % 50)});
      known_keys.push_back(key);
      pool.cache(page, std::move(key));
    } else if (action == 3 && !known_keys.empty()) {
      const int32_t page = pool.lookup(known_keys[rng() % known_keys.size()]);
      if (page >= 0) {
        pool.acquire(page);
        holders.push_back({page});
      }
    }
    const Status status = pool.check_invariants();
    ASSERT_TRUE(status.ok()) << "step " << step << ": " << status.message();
    std::vector<int32_t> expected_refs(k_pages, 0);
    for (const auto& pages : holders) for (int32_t p : pages) ++expected_refs[size_t(p)];
    for (int32_t p = 0; p < k_pages; ++p) ASSERT_EQ(pool.ref_count(p), expected_refs[size_t(p)]) << "page " << p;
  }
  for (const auto& pages : holders) for (int32_t p : pages) pool.release(p);
  EXPECT_EQ(pool.n_unheld(), k_pages);
  EXPECT_TRUE(pool.check_invariants().ok());
}

}  // namespace
}  // namespace ds
