#include "cli/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ds {

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repetitions) {
  const int64_t words = int64_t(bytes / sizeof(uint64_t)) / 8 * 8;
  std::unique_ptr<uint64_t[]> data(new uint64_t[size_t(words)]);
  // Thread t's words, in whole groups of eight.
  auto share = [words](int t, int n) { return std::make_pair(words / 8 * t / n * 8, words / 8 * (t + 1) / n * 8); };
  pool.run([&](int thread, int n_threads) {
    const auto [begin, end] = share(thread, n_threads);
    for (int64_t i = begin; i < end; ++i) data[size_t(i)] = uint64_t(i);
  });
  // One cache line per thread for the results, so that the threads share none.
  std::vector<uint64_t> sinks(size_t(pool.n_threads()) * 8);
  double best = 0.0;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.run([&](int thread, int n_threads) {
      const auto [begin, end] = share(thread, n_threads);
      // Eight independent chains: the loads, not a dependency, set the pace.
      uint64_t a[8] = {};
      for (int64_t i = begin; i < end; i += 8)
        for (int k = 0; k < 8; ++k) a[k] ^= data[size_t(i + k)];
      for (uint64_t v : a) sinks[size_t(thread) * 8] ^= v;
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(words * 8) / seconds);
  }
  // The reads must be observable, or the compiler may drop them.
  volatile uint64_t keep = 0;
  for (uint64_t s : sinks) keep = keep ^ s;
  (void)keep;
  return best;
}

}  // namespace ds
