#include "server/loopback_exchange.h"

namespace ds {

LoopbackStrand::LoopbackStrand() : thread_([this] { work(); }) {}

LoopbackStrand::~LoopbackStrand() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void LoopbackStrand::at(std::chrono::steady_clock::time_point when, std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    tasks_.emplace(when, std::move(fn));
  }
  wake_.notify_all();
}

void LoopbackStrand::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (!tasks_.empty() && tasks_.begin()->first <= now) {
      auto fn = std::move(tasks_.begin()->second);
      tasks_.erase(tasks_.begin());
      lock.unlock();
      fn();
      fn = nullptr;  // what it holds goes before the lock is taken again
      lock.lock();
      continue;
    }
    if (stopping_) return;
    if (tasks_.empty()) {
      wake_.wait(lock);
    } else {
      wake_.wait_until(lock, tasks_.begin()->first);
    }
  }
}

LoopbackExchange::~LoopbackExchange() {
  if (!ended_ && done_) done_(0, "");
}

void LoopbackExchange::cancel() {
  strand_.post([self = shared_from_this()] {
    if (self->cancelled_ || self->ended_) return;
    self->cancelled_ = true;
    if (auto fn = std::move(self->on_disconnect_)) fn();
  });
}

void LoopbackExchange::after(std::chrono::milliseconds delay, std::function<void()> fn) {
  std::weak_ptr<LoopbackExchange> weak = shared_from_this();
  strand_.at(std::chrono::steady_clock::now() + delay, [weak, fn = std::move(fn)] {
    if (auto self = weak.lock(); self && !self->ended_) fn();
  });
}

void LoopbackExchange::respond(int status, const std::string&, const std::string& body, const HttpHeaders&) { finish(status, body); }

void LoopbackExchange::begin_stream(int status, const std::string&, const HttpHeaders&) { status_ = status; }

void LoopbackExchange::finish(int status, const std::string& body) {
  if (ended_) return;
  ended_ = true;
  on_disconnect_ = nullptr;
  if (auto done = std::move(done_)) done(status, body);
}

}  // namespace ds
