#include "engine/request_stream.h"

namespace ds {

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (ended_) return;
    ended_ = event.finish != FinishReason::none;
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
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
