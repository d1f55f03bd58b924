#pragma once
// An HttpExchange with no socket: a request made inside the server (a batch
// line, batch_runner.h) goes through the same route, admission and engine as
// a client's, and its whole response comes back to a callback. The
// exchanges of one LoopbackStrand share its one thread as their strand, with
// its timers (after()) on the same thread.
//
// The callback runs once: with the status and body when the response ends,
// or with status 0 when the exchange is released unanswered (cancelled
// before it started, or a request the server dropped).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/http_server.h"

namespace ds {

class LoopbackStrand {
 public:
  LoopbackStrand();
  ~LoopbackStrand();  // runs what is due, then stops; later tasks are dropped
  void post(std::function<void()> fn) { at(std::chrono::steady_clock::now(), std::move(fn)); }
  void at(std::chrono::steady_clock::time_point when, std::function<void()> fn);

 private:
  void work();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

class LoopbackExchange : public HttpExchange, public std::enable_shared_from_this<LoopbackExchange> {
 public:
  using Done = std::function<void(int status, const std::string& body)>;
  LoopbackExchange(LoopbackStrand& strand, Done done) : strand_(strand), done_(std::move(done)) {}
  ~LoopbackExchange() override;

  // As a client leaving: the server cancels the request (on the strand).
  void cancel();

  void post(std::function<void()> fn) override { strand_.post(std::move(fn)); }
  void after(std::chrono::milliseconds delay, std::function<void()> fn) override;
  void respond(int status, const std::string& content_type, const std::string& body, const HttpHeaders& extra = {}) override;
  void begin_stream(int status, const std::string& content_type, const HttpHeaders& extra = {}) override;
  void write_chunk(const std::string& data) override { body_ += data; }
  void end_stream() override { finish(status_, body_); }
  void on_disconnect(std::function<void()> fn) override { on_disconnect_ = std::move(fn); }
  bool disconnected() const override { return cancelled_; }

 private:
  void finish(int status, const std::string& body);

  LoopbackStrand& strand_;
  Done done_;
  std::function<void()> on_disconnect_;
  bool cancelled_ = false, ended_ = false;
  int status_ = 0;
  std::string body_;
};

}  // namespace ds
