#pragma once
// Runs the lines of stored batches (batch_store.h) through the server, as
// requests of the batch's tenant at batch priority (below every online
// request: scheduler.h), at most `lines_in_flight` at once. Each line's
// result is committed when it ends; a line refused for now (503: the KV
// watermark, a drain, a swap) waits a moment and runs again. A batch ends
// once none of its lines is in flight: completed, cancelled or expired.
//
//   store.pending_lines ──► execute(line, exchange) ──► done(status, body) ──► store.finish_line
//        ▲                                                   │ 503 / no answer
//        └──────────────────── retried later ◄───────────────┘
//
// stop() cancels the lines in flight: those it cut record nothing and run
// again at the next start, so no finished line runs twice.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "server/batch_store.h"
#include "server/loopback_exchange.h"

namespace ds {

class BatchRunner {
 public:
  // Runs one line: the server answers it through the exchange (on the exchange's strand).
  using Execute = std::function<void(const PendingLine& line, std::shared_ptr<HttpExchange> exchange)>;
  BatchRunner(BatchStore& store, Execute execute, int lines_in_flight);
  ~BatchRunner();
  // Something changed (a batch created or cancelled): look now rather than at the next tick.
  void wake();
  void stop();

 private:
  struct Ended {
    PendingLine line;
    int status = 0;
    std::string body;
  };
  void work();
  void start_lines();
  void record(const Ended& line);
  void end_batches();
  // Cancels the lines in flight whose request id `which` picks; how many it picked.
  size_t cancel_where(const std::function<bool(const std::string& request_id)>& which);
  size_t count_where(const std::function<bool(const std::string& request_id)>& which);

  BatchStore& store_;
  Execute execute_;
  const int lines_in_flight_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false, woken_ = false;
  std::vector<Ended> results_;  // ended lines, waiting for the runner thread to record them
  // By request id, from the start of a line to its result's record (so a
  // line that has ended is not taken for pending while its result is on the way).
  std::map<std::string, std::weak_ptr<LoopbackExchange>> in_flight_;
  std::map<std::string, std::chrono::steady_clock::time_point> retry_at_;  // refused for now: not before then
  std::thread thread_;
  LoopbackStrand strand_;  // last: the exchanges it still holds end before the rest goes
};

// A line's record in the output or error file (OpenAI's shape): the response
// (status code, request id, body) and, when it failed, its error.
std::string batch_line_record(const PendingLine& line, int status, const std::string& body);

}  // namespace ds
