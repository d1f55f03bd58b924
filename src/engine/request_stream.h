#pragma once
// The outputs of one request, handed from the engine thread to the thread
// that serves the client. The engine pushes; the client waits and pops.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"

namespace ds {

struct StreamEvent {
  std::string text;             // new UTF-8 text, complete characters only
  std::vector<int32_t> tokens;  // the tokens that produced it
  std::vector<TokenLogprobs> logprobs;  // one per token, when the request asked for them
  std::vector<TokenLogprobs> prompt_logprobs;  // with the first token, when asked: prompt tokens 1..
  std::vector<float> embedding;                // an embedding request's result
  FinishReason finish = FinishReason::none;
  std::string error;            // set when the request failed (finish = error)
  std::string stop_string;      // with finish stop: the stop string that matched (empty: an end or stop token)
  std::optional<RequestMetrics> metrics;  // with the final event of a request that ran

  // A final event carrying no text.
  static StreamEvent ending(FinishReason reason, std::string error = {}) {
    StreamEvent e;
    e.finish = reason;
    e.error = std::move(error);
    return e;
  }
};

class RequestStream {
 public:
  explicit RequestStream(int64_t id) : id_(id) {}
  int64_t id() const { return id_; }

  // Engine side.
  void push(StreamEvent event);

  // Client side: the next event, waiting up to `timeout`; nullopt on timeout
  // or once the final event has been taken.
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout);
  bool done() const;
  // For asynchronous clients: `listener` runs after every push, on the
  // engine's thread (so it must only hand off, e.g. post to an event loop),
  // and once at once if events are already waiting.
  void set_listener(std::function<void()> listener);

 private:
  const int64_t id_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  bool ended_ = false;  // the final event was pushed
  bool drained_ = false;  // ... and taken
  std::function<void()> listener_;
};

}  // namespace ds
