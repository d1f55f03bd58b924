#pragma once
// A persistent pool of worker threads for data-parallel kernels.
//
// run(fn) calls fn(thread_index, n_threads) once on every thread, the caller
// being thread 0, and returns when all have finished. Workers spin briefly
// before sleeping, so back-to-back kernel launches in one forward pass do not
// pay a futex wake-up each. Only one thread may call run() at a time (the
// engine thread owns the pool).

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace ds {

// A non-owning reference to a callable, cheaper than std::function on hot paths.
template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  FunctionRef(F&& f)  // NOLINT: implicit by design
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(args...);
        }) {}
  R operator()(Args... args) const { return call_(object_, args...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }
  void run(FunctionRef<void(int thread_index, int n_threads)> fn);

  // Splits [0, n) into n_threads contiguous ranges, one per thread.
  void parallel_for(int64_t n, FunctionRef<void(int64_t begin, int64_t end)> fn);

  // Hands out [0, n) in chunks of `chunk` to whichever thread is free: for
  // work of uneven cost (causal attention) or on a machine whose cores are
  // shared with other work.
  void parallel_for_dynamic(int64_t n, int64_t chunk,
                            FunctionRef<void(int64_t begin, int64_t end, int thread_index)> fn);

 private:
  void worker_loop(int thread_index);

  int n_threads_;
  std::vector<std::thread> workers_;
  FunctionRef<void(int, int)>* task_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> n_pending_{0};
  std::atomic<bool> stopping_{false};
  alignas(64) std::atomic<int64_t> next_chunk_{0};
};

}  // namespace ds
