#include "cli/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ds {
namespace {

// The xor of `streams` parts of `part` words each (whole groups of eight),
// read side by side. Cloned for the wider vector units: their loads are what
// a decode kernel issues, and the baseline x86-64 build's 8-byte loads read
// slower than the memory gives (22 GB/s against 29 on that Xeon).
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t xor_of_streams(const uint64_t* data, int64_t part,
                                                                                   int64_t streams) {
  // Eight independent chains: the loads, not a dependency, set the pace.
  uint64_t a[8] = {};
  for (int64_t i = 0; i < part; i += 8)
    for (int64_t s = 0; s < streams; ++s)
      for (int k = 0; k < 8; ++k) a[k] ^= data[s * part + i + k];
  uint64_t all = 0;
  for (uint64_t v : a) all ^= v;
  return all;
}

}  // namespace

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
  // A thread reads its share as one sequential stream, or as eight read in
  // step (its eight parts side by side): CPUs differ in which their
  // prefetchers follow faster (a Sapphire Rapids-class Xeon: one stream a
  // thread 20.6 GB/s, eight 28.9), and the faster is what the memory gives.
  double best = 0.0;
  for (int r = 0; r < repetitions; ++r) {
    for (const int64_t streams : {1, 8}) {
      const auto start = std::chrono::steady_clock::now();
      pool.run([&](int thread, int n_threads) {
        const auto [begin, end] = share(thread, n_threads);
        const int64_t part = (end - begin) / 8 / streams * 8;
        uint64_t all = xor_of_streams(data.get() + begin, part, streams);
        for (int64_t i = begin + streams * part; i < end; ++i) all ^= data[size_t(i)];
        sinks[size_t(thread) * 8] ^= all;
      });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, double(words * 8) / seconds);
    }
  }
  // The reads must be observable, or the compiler may drop them.
  volatile uint64_t keep = 0;
  for (uint64_t s : sinks) keep = keep ^ s;
  (void)keep;
  return best;
}

}  // namespace ds
