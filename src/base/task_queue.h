#pragma once
// A few threads running queued tasks, with a bound on the queue: the place
// for work too slow for an I/O thread (parsing a large body, rendering a chat
// template, tokenizing a prompt), so the event loop keeps answering.
// try_post() says false instead of queueing past the bound; the caller
// refuses the work (503). The destructor runs what is queued, then joins.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds {

class TaskQueue {
 public:
  TaskQueue(int n_threads, size_t max_queued);
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  // Thread-safe. False when max_queued tasks already wait.
  [[nodiscard]] bool try_post(std::function<void()> task);

 private:
  void work();

  const size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ds
