#pragma once
// The canary release's audit, in one SQLite file (WAL mode: readers such as
// `sqlite3 audit.db` or a report query never block the router's writes, nor
// it theirs). Two tables:
//
//   requests   one row per canary request (served by the canary) and per
//              shadow request (served by stable, copied to the canary):
//              request id, time, kind, stage, tenant, path, the input where
//              the tenant allows it, and for each version its status,
//              latency, TTFT, output tokens, output and error; whether the
//              pair was greedy and, for a greedy pair, exact match and token overlap
//   decisions  one row per decision of the release (start, advance, promote,
//              rollback; by the policy or an operator) with its reasons and
//              the figures it was taken on
//
// Rows are queued and written by the log's own thread in transactions, so a
// slow disk never holds a request; a queue over its bound drops rows and
// counts them (dsinfer_router:audit_rows_dropped_total) rather than grow.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "base/status.h"

struct sqlite3;

namespace ds {

// One version's answer to an audited request.
struct AuditAnswer {
  std::string version;
  int status = 0;  // HTTP status; 502 for a stream that broke; 0: never answered
  double latency_ms = 0;
  std::optional<double> ttft_ms, tpot_ms;
  int64_t output_tokens = 0;
  std::string output, error;
};

struct AuditRequestRow {
  std::string request_id;
  int64_t unix_ms = 0;
  std::string kind;  // "canary" | "shadow"
  int stage_percent = 0;
  std::string tenant, path;
  std::optional<std::string> input;  // the request body, where the tenant allows it
  std::optional<AuditAnswer> stable, canary;
  bool greedy = false;
  std::optional<bool> exact_match;
  std::optional<double> token_overlap;
};

struct AuditDecisionRow {
  int64_t unix_ms = 0;
  std::string stable_version, canary_version;
  int from_percent = 0, to_percent = 0;
  std::string action;  // "start" | "advance" | "promote" | "rollback"
  std::string state;   // after it: "running" | "promoted" | "rolled_back"
  std::string by;      // "policy" or "operator:NAME"
  std::string reasons_json, figures_json;
};

class AuditLog {
 public:
  // Opens (creating) the file and its tables.
  static Result<std::unique_ptr<AuditLog>> open(const std::string& path);
  ~AuditLog();  // writes what is queued, then closes

  void record(AuditRequestRow row);
  void record(AuditDecisionRow row);
  // The last `limit` decisions of this release (stable -> canary), oldest first: read at start to resume it.
  Result<std::vector<AuditDecisionRow>> decisions(const std::string& stable, const std::string& canary, int limit);
  int64_t rows_written() const;
  int64_t rows_dropped() const;

 private:
  using Row = std::variant<AuditRequestRow, AuditDecisionRow>;
  explicit AuditLog(sqlite3* db);
  void write_loop();
  void enqueue(Row row);
  Status write(const Row& row);

  static constexpr size_t k_max_queued = 100000;
  sqlite3* db_;
  mutable std::mutex mutex_;  // guards the fields below
  std::condition_variable wake_;
  std::deque<Row> queue_;
  bool stopping_ = false;
  int64_t written_ = 0, dropped_ = 0;
  std::thread writer_;
};

}  // namespace ds
