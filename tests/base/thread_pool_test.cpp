#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ds {
namespace {

TEST(ThreadPool, EveryThreadRunsEachTaskOnce) {
  for (int n_threads : {1, 2, 3}) {
    ThreadPool pool(n_threads);
    for (int round = 0; round < 1000; ++round) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n_threads));
      pool.run([&](int index, int n) {
        EXPECT_EQ(n, n_threads);
        hits[size_t(index)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
  ThreadPool pool(2);
  for (int64_t n : {0, 1, 2, 3, 1001}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) seen[size_t(i)].fetch_add(1);
    });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  }
}

}  // namespace
}  // namespace ds
