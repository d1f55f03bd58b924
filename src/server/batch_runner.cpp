#include "server/batch_runner.h"

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/unix_time.h"

namespace ds {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto k_tick = std::chrono::milliseconds(500);        // a look at the store without being woken
constexpr auto k_retry_after = std::chrono::seconds(1);         // a line refused for now
constexpr auto k_stop_wait = std::chrono::seconds(10);          // lines in flight ending after stop()

// Refused for now, not for what the line asks: it runs again.
bool refused_for_now(int status) { return status == 0 || status == 429 || status == 503; }

}  // namespace

std::string batch_line_record(const PendingLine& line, int status, const std::string& body) {
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded()) parsed = body;
  json record = {{"id", line.request_id()}, {"custom_id", line.custom_id},
                 {"response", {{"status_code", status}, {"request_id", line.request_id()}, {"body", parsed}}}, {"error", nullptr}};
  if (status != 200) {
    const json* error = parsed.is_object() && parsed.contains("error") && parsed["error"].is_object() ? &parsed["error"] : nullptr;
    const json code = error && error->contains("code") && !(*error)["code"].is_null() ? (*error)["code"] : json("http_" + std::to_string(status));
    record["error"] = {{"code", code}, {"message", error ? error->value("message", "") : body.substr(0, 512)}};
  }
  return record.dump(-1, ' ', false, json::error_handler_t::replace);
}

BatchRunner::BatchRunner(BatchStore& store, Execute execute, int lines_in_flight)
    : store_(store), execute_(std::move(execute)), lines_in_flight_(lines_in_flight) {
  thread_ = std::thread([this] { work(); });  // here: every member, the strand among them, exists
}

BatchRunner::~BatchRunner() { stop(); }

void BatchRunner::wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

void BatchRunner::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  cancel_where([](const std::string&) { return true; });
  std::unique_lock lock(mutex_);
  // Every line in flight has ended once each has its result waiting.
  if (!wake_.wait_for(lock, k_stop_wait, [this] { return results_.size() == in_flight_.size(); })) {
    DS_LOG_WARN("batch runner: %zu lines still in flight after stop; they run again at the next start", in_flight_.size() - results_.size());
  }
  std::vector<Ended> ended = std::move(results_);
  results_.clear();
  lock.unlock();
  for (const Ended& line : ended) record(line);  // what finished before the cancel counts; the cancelled run again
}

size_t BatchRunner::cancel_where(const std::function<bool(const std::string& request_id)>& which) {
  // Outside the lock: the last reference to an exchange may go here, and its
  // release calls back into this runner.
  std::vector<std::shared_ptr<LoopbackExchange>> chosen;
  size_t matched = 0;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, weak] : in_flight_) {
      if (!which(id)) continue;
      ++matched;
      if (auto exchange = weak.lock()) chosen.push_back(std::move(exchange));
    }
  }
  for (const auto& exchange : chosen) exchange->cancel();
  return matched;
}

void BatchRunner::work() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    std::vector<Ended> ended = std::move(results_);
    results_.clear();
    lock.unlock();
    for (const Ended& line : ended) record(line);
    end_batches();
    start_lines();
    lock.lock();
    if (!woken_ && results_.empty() && !stopping_) wake_.wait_for(lock, k_tick);
    woken_ = false;
  }
}

void BatchRunner::record(const Ended& r) {
  const std::string id = r.line.request_id();
  if (refused_for_now(r.status)) {
    retry_at_[id] = Clock::now() + k_retry_after;
  } else {
    retry_at_.erase(id);
    store_.finish_line(r.line.batch_id, r.line.index, r.status == 200, batch_line_record(r.line, r.status, r.body));
  }
  // Only now, with its result in the store, may the line be looked up as pending again.
  std::lock_guard lock(mutex_);
  in_flight_.erase(id);
}

void BatchRunner::end_batches() {
  for (const auto& [batch_id, status] : store_.batches_to_end(unix_seconds())) {
    const std::string prefix = batch_request_prefix(batch_id);
    const auto of_batch = [&](const std::string& id) { return id.rfind(prefix, 0) == 0; };
    // A completed batch's last lines end by themselves; a cancelled or expired one's stop now.
    const size_t busy = status == "completed" ? count_where(of_batch) : cancel_where(of_batch);
    if (busy > 0) continue;
    if (Status ended = store_.end_batch(batch_id, status, unix_seconds()); !ended.ok()) {
      DS_LOG_ERROR("batch %s not ended: %s", batch_id.c_str(), ended.message().c_str());
    } else {
      DS_LOG_INFO("batch %s %s", batch_id.c_str(), status.c_str());
    }
  }
}

size_t BatchRunner::count_where(const std::function<bool(const std::string& request_id)>& which) {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [id, weak] : in_flight_) n += which(id);
  return n;
}

void BatchRunner::start_lines() {
  std::unique_lock lock(mutex_);
  const int64_t room = lines_in_flight_ - int64_t(in_flight_.size());
  if (room <= 0 || stopping_) return;
  const int64_t skipped = int64_t(in_flight_.size() + retry_at_.size());
  lock.unlock();
  std::vector<PendingLine> lines = store_.pending_lines(room + skipped);
  std::vector<std::pair<PendingLine, std::shared_ptr<LoopbackExchange>>> starting;
  lock.lock();
  const auto now = Clock::now();
  std::erase_if(retry_at_, [&](const auto& entry) { return entry.second <= now; });  // due: no longer held back
  for (PendingLine& line : lines) {
    if (int64_t(starting.size()) == room || stopping_) break;
    const std::string id = line.request_id();
    if (in_flight_.count(id)) continue;
    if (retry_at_.count(id)) continue;
    auto exchange = std::make_shared<LoopbackExchange>(strand_, [this, line](int status, const std::string& body) {
      {
        std::lock_guard lock(mutex_);
        results_.push_back(Ended{line, status, body});
      }
      wake_.notify_all();
    });
    in_flight_[id] = exchange;
    starting.emplace_back(std::move(line), std::move(exchange));
  }
  lock.unlock();  // before `starting` goes: an exchange released calls back into this runner
  for (auto& started : starting) {
    strand_.post([this, line = std::move(started.first), exchange = started.second] { execute_(line, exchange); });
  }
}

}  // namespace ds
