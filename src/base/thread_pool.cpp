#include "base/thread_pool.h"

#include <algorithm>
#include <thread>

#include "base/status.h"

namespace ds {
namespace {

constexpr int k_spin_iterations = 1 << 14;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::worker_loop(int thread_index) {
  uint32_t seen = 0;  // the generation before any run(): a worker that starts late still sees the first task
  for (;;) {
    uint32_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen && spin < k_spin_iterations; ++spin) {
      cpu_relax();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      generation_.wait(seen);
      continue;
    }
    seen = now;
    if (stopping_.load()) return;
    (*task_)(thread_index, n_threads_);
    n_pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(FunctionRef<void(int, int)> fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  task_ = &fn;
  n_pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(0, n_threads_);
  // Spin while the workers are about to finish; past that, yield, so that a
  // worker descheduled by other load (more threads than cores) gets the core
  // instead of this thread burning its time slice.
  for (int spin = 0; n_pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < k_spin_iterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  task_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn) {
  run([&](int thread_index, int n_threads) {
    const int64_t begin = n * thread_index / n_threads;
    const int64_t end = n * (thread_index + 1) / n_threads;
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, FunctionRef<void(int64_t, int64_t, int)> fn) {
  next_chunk_.store(0, std::memory_order_relaxed);
  run([&](int thread_index, int) {
    for (;;) {
      const int64_t begin = next_chunk_.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= n) return;
      fn(begin, std::min(n, begin + chunk), thread_index);
    }
  });
}

}  // namespace ds
