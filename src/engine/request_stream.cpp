#include "engine/request_stream.h"

namespace ds {

void RequestStream::push(StreamEvent event) {
  std::function<void()> listener;
  {
    std::lock_guard lock(mutex_);
    if (ended_) return;
    ended_ = event.finish != FinishReason::none;
    events_.push_back(std::move(event));
    listener = listener_;
  }
  ready_.notify_all();
  if (listener) listener();
}

void RequestStream::set_listener(std::function<void()> listener) {
  bool waiting = false;
  {
    std::lock_guard lock(mutex_);
    listener_ = listener;
    waiting = !events_.empty();
  }
  if (waiting && listener) listener();
}

std::optional<StreamEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.finish != FinishReason::none) drained_ = true;
  return event;
}

bool RequestStream::done() const {
  std::lock_guard lock(mutex_);
  return drained_;
}

}  // namespace ds
