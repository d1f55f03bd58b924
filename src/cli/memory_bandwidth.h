#pragma once
// The machine's memory read bandwidth, measured as decode meets it: every
// thread of the pool streams its share of a buffer far larger than the
// caches, as one stream and as eight, once each per repetition, with the
// CPU's widest loads; the best read counts (STREAM's rule).

#include <cstddef>

#include "base/thread_pool.h"

namespace ds {

// Bytes per second over a buffer of `bytes` (first touched by the threads that read it).
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repetitions);

}  // namespace ds
