#include "server/response_store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "base/sqlite.h"
#include "base/unix_time.h"

namespace ds {
namespace {

constexpr const char* k_schema = R"sql(
CREATE TABLE IF NOT EXISTS responses (
  tenant TEXT NOT NULL,
  id TEXT NOT NULL,
  created INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  response TEXT NOT NULL,
  input TEXT NOT NULL,
  context TEXT NOT NULL,
  PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses(created);
)sql";

}  // namespace

Result<std::unique_ptr<ResponseStore>> ResponseStore::open(const std::string& dir, ResponseStoreLimits limits) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Status::error("--store-dir " + dir + ": " + std::strerror(errno));
  auto db = open_sqlite_wal(dir + "/responses.sqlite", k_schema);
  if (!db.ok()) return Status::error("--store-dir: " + db.message());
  auto store = std::unique_ptr<ResponseStore>(new ResponseStore(db.value(), limits));
  SqliteStatement total(store->db_, "SELECT COALESCE(SUM(bytes), 0) FROM responses");
  if (sqlite3_step(total.get()) == SQLITE_ROW) store->bytes_ = sqlite3_column_int64(total.get(), 0);
  store->prune(unix_seconds());
  return store;
}

ResponseStore::~ResponseStore() { sqlite3_close(db_); }

Status ResponseStore::put(const std::string& tenant, const std::string& id, const StoredResponse& r) {
  std::lock_guard lock(mutex_);
  const int64_t now = unix_seconds();
  SqliteStatement replaced(db_, "DELETE FROM responses WHERE tenant = ? AND id = ? RETURNING bytes");
  replaced.bind_all(tenant, id);
  bytes_ -= removed_bytes(replaced.get());
  SqliteStatement s(db_, "INSERT INTO responses (tenant, id, created, bytes, response, input, context) VALUES (?, ?, ?, ?, ?, ?, ?)");
  if (!s.ok()) return Status::error(std::string("response store: ") + sqlite3_errmsg(db_));
  const int64_t bytes = int64_t(r.response_json.size() + r.input_json.size() + r.context_json.size());
  s.bind_all(tenant, id, now, bytes, r.response_json, r.input_json, r.context_json);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return Status::error(std::string("response store: ") + sqlite3_errmsg(db_));
  bytes_ += bytes;
  prune(now);
  return Status();
}

std::optional<StoredResponse> ResponseStore::get(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_, "SELECT response, input, context FROM responses WHERE tenant = ? AND id = ? AND created >= ?");
  if (!s.ok()) return std::nullopt;
  s.bind_all(tenant, id, unix_seconds() - limits_.max_age_seconds);
  if (sqlite3_step(s.get()) != SQLITE_ROW) return std::nullopt;
  return StoredResponse{sqlite_column_text(s.get(), 0), sqlite_column_text(s.get(), 1), sqlite_column_text(s.get(), 2)};
}

bool ResponseStore::remove(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_, "DELETE FROM responses WHERE tenant = ? AND id = ? RETURNING bytes");
  if (!s.ok()) return false;
  s.bind_all(tenant, id);
  bytes_ -= removed_bytes(s.get());
  return sqlite3_changes(db_) > 0;
}

int64_t ResponseStore::removed_bytes(sqlite3_stmt* statement) {
  int64_t bytes = 0;
  while (sqlite3_step(statement) == SQLITE_ROW) bytes += sqlite3_column_int64(statement, 0);
  return bytes;
}

// Under the lock: rows past the age limit, then the oldest until the rest fit the size limit.
void ResponseStore::prune(int64_t now) {
  SqliteStatement old(db_, "DELETE FROM responses WHERE created < ? RETURNING bytes");
  old.bind(now - limits_.max_age_seconds);
  bytes_ -= removed_bytes(old.get());
  if (bytes_ <= limits_.max_bytes) return;
  // Oldest first: the newest rows whose running total fits are kept.
  SqliteStatement trim(db_, R"sql(
    DELETE FROM responses WHERE rowid IN (
      SELECT rowid FROM (SELECT rowid, SUM(bytes) OVER (ORDER BY created DESC, rowid DESC) AS kept FROM responses) WHERE kept > ?)
    RETURNING bytes)sql");
  trim.bind(limits_.max_bytes);
  bytes_ -= removed_bytes(trim.get());
}

}  // namespace ds
