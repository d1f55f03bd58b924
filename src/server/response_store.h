#pragma once
// Stored Responses (POST /v1/responses with store: true) in SQLite under
// --store-dir, so that previous_response_id and GET /v1/responses/{id} work
// across a restart. WAL journal: a committed response survives a kill of the
// process at any moment (synchronous=NORMAL: what a power cut may lose is the
// last transactions, never the file's consistency). Every query names the
// tenant: another tenant's id is not found, never its content. Bounded: rows
// older than the age limit go, and past the size limit the oldest go first.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ds {

struct StoredResponse {
  std::string response_json;  // the Response object as returned
  std::string input_json;     // this response's own input items (GET .../input_items)
  std::string context_json;   // every item the model saw and wrote: the next turn's history
};

struct ResponseStoreLimits {
  int64_t max_bytes = int64_t(1) << 30;        // all tenants' responses together
  int64_t max_age_seconds = 30 * 24 * 3600;    // OpenAI keeps stored responses 30 days
};

class ResponseStore {
 public:
  // Opens (creating) DIR/responses.sqlite.
  static Result<std::unique_ptr<ResponseStore>> open(const std::string& dir, ResponseStoreLimits limits);
  ~ResponseStore();

  Status put(const std::string& tenant, const std::string& id, const StoredResponse& response);
  std::optional<StoredResponse> get(const std::string& tenant, const std::string& id);
  // Whether it was there (and is gone now).
  bool remove(const std::string& tenant, const std::string& id);

 private:
  explicit ResponseStore(sqlite3* db, ResponseStoreLimits limits) : db_(db), limits_(limits) {}
  void prune(int64_t now);
  // Runs a DELETE ... RETURNING bytes; the bytes it removed.
  int64_t removed_bytes(sqlite3_stmt* statement);

  sqlite3* db_;
  ResponseStoreLimits limits_;
  int64_t bytes_ = 0;  // the rows' bytes, counted as rows come and go (read once at open): no scan per write
  std::mutex mutex_;  // one connection, one user at a time
};

}  // namespace ds
