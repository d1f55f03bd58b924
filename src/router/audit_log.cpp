#include "router/audit_log.h"

#include "base/log.h"
#include "base/sqlite.h"

namespace ds {
namespace {

constexpr const char* k_schema = R"sql(
CREATE TABLE IF NOT EXISTS requests (
  id INTEGER PRIMARY KEY,
  request_id TEXT NOT NULL,
  time TEXT NOT NULL,
  unix_ms INTEGER NOT NULL,
  kind TEXT NOT NULL,
  stage_percent INTEGER NOT NULL,
  tenant TEXT NOT NULL,
  path TEXT NOT NULL,
  input TEXT,
  stable_version TEXT, stable_status INTEGER, stable_latency_ms REAL, stable_ttft_ms REAL, stable_tpot_ms REAL,
  stable_output_tokens INTEGER, stable_output TEXT, stable_error TEXT,
  canary_version TEXT, canary_status INTEGER, canary_latency_ms REAL, canary_ttft_ms REAL, canary_tpot_ms REAL,
  canary_output_tokens INTEGER, canary_output TEXT, canary_error TEXT,
  greedy INTEGER NOT NULL,
  exact_match INTEGER,
  token_overlap REAL
);
CREATE INDEX IF NOT EXISTS requests_by_request_id ON requests(request_id);
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY,
  time TEXT NOT NULL,
  unix_ms INTEGER NOT NULL,
  stable_version TEXT NOT NULL,
  canary_version TEXT NOT NULL,
  from_percent INTEGER NOT NULL,
  to_percent INTEGER NOT NULL,
  action TEXT NOT NULL,
  state TEXT NOT NULL,
  decided_by TEXT NOT NULL,
  reasons TEXT NOT NULL,
  figures TEXT NOT NULL
);
)sql";

}  // namespace

Result<std::unique_ptr<AuditLog>> AuditLog::open(const std::string& path) {
  auto db = open_sqlite_wal(path, k_schema);
  if (!db.ok()) return Status::error("audit: " + db.message());
  return std::unique_ptr<AuditLog>(new AuditLog(db.value()));
}

AuditLog::AuditLog(sqlite3* db) : db_(db), writer_([this] { write_loop(); }) {}

AuditLog::~AuditLog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
  sqlite3_close(db_);
}

void AuditLog::enqueue(Row row) {
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() >= k_max_queued) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(row));
  }
  wake_.notify_one();
}

void AuditLog::record(AuditRequestRow row) { enqueue(std::move(row)); }
void AuditLog::record(AuditDecisionRow row) { enqueue(std::move(row)); }

int64_t AuditLog::rows_written() const {
  std::lock_guard lock(mutex_);
  return written_;
}

int64_t AuditLog::rows_dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

void AuditLog::write_loop() {
  for (;;) {
    std::deque<Row> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, everything written
      batch.swap(queue_);
    }
    sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr);
    int64_t ok = 0;
    for (const Row& row : batch) {
      if (Status s = write(row); s.ok()) {
        ++ok;
      } else {
        DS_LOG_WARN("audit: a row was not written: %s", s.message().c_str());
      }
    }
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      DS_LOG_WARN("audit: %lld rows were not written: %s", static_cast<long long>(ok), sqlite3_errmsg(db_));
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      ok = 0;
    }
    std::lock_guard lock(mutex_);
    written_ += ok;
    dropped_ += int64_t(batch.size()) - ok;
  }
}

Status AuditLog::write(const Row& row) {
  if (const auto* r = std::get_if<AuditRequestRow>(&row)) {
    SqliteStatement s(db_,
                "INSERT INTO requests (request_id, time, unix_ms, kind, stage_percent, tenant, path, input,"
                " stable_version, stable_status, stable_latency_ms, stable_ttft_ms, stable_tpot_ms, stable_output_tokens, stable_output, stable_error,"
                " canary_version, canary_status, canary_latency_ms, canary_ttft_ms, canary_tpot_ms, canary_output_tokens, canary_output, canary_error,"
                " greedy, exact_match, token_overlap)"
                " VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ', ? / 1000.0, 'unixepoch'), ?, ?, ?, ?, ?, ?,"
                " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!s.ok()) return Status::error(sqlite3_errmsg(db_));
    s.bind_all(r->request_id, r->unix_ms, r->unix_ms, r->kind, int64_t(r->stage_percent), r->tenant, r->path, r->input);
    for (const auto* answer : {&r->stable, &r->canary}) {
      if (!*answer) {
        for (int i = 0; i < 8; ++i) sqlite3_bind_null(s.get(), s.next++);
        continue;
      }
      const AuditAnswer& a = **answer;
      s.bind_all(a.version, int64_t(a.status), a.latency_ms, a.ttft_ms, a.tpot_ms, a.output_tokens, a.output,
                 a.error.empty() ? std::optional<std::string>() : std::optional<std::string>(a.error));
    }
    s.bind_all(int64_t(r->greedy), r->exact_match ? std::optional<int64_t>(*r->exact_match) : std::nullopt, r->token_overlap);
    if (sqlite3_step(s.get()) != SQLITE_DONE) return Status::error(sqlite3_errmsg(db_));
    return Status();
  }
  const auto& d = std::get<AuditDecisionRow>(row);
  SqliteStatement s(db_,
              "INSERT INTO decisions (time, unix_ms, stable_version, canary_version, from_percent, to_percent, action, state, decided_by, reasons, figures)"
              " VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', ? / 1000.0, 'unixepoch'), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!s.ok()) return Status::error(sqlite3_errmsg(db_));
  s.bind_all(d.unix_ms, d.unix_ms, d.stable_version, d.canary_version, int64_t(d.from_percent), int64_t(d.to_percent), d.action, d.state, d.by,
             d.reasons_json, d.figures_json);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return Status::error(sqlite3_errmsg(db_));
  return Status();
}

Result<std::vector<AuditDecisionRow>> AuditLog::decisions(const std::string& stable, const std::string& canary, int limit) {
  SqliteStatement s(db_,
              "SELECT unix_ms, from_percent, to_percent, action, state, decided_by, reasons, figures FROM"
              " (SELECT * FROM decisions WHERE stable_version = ? AND canary_version = ? ORDER BY id DESC LIMIT ?) ORDER BY id");
  if (!s.ok()) return Status::error(std::string("audit: ") + sqlite3_errmsg(db_));
  s.bind_all(stable, canary, int64_t(limit));
  std::vector<AuditDecisionRow> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    AuditDecisionRow d;
    d.unix_ms = sqlite3_column_int64(s.get(), 0);
    d.stable_version = stable;
    d.canary_version = canary;
    d.from_percent = sqlite3_column_int(s.get(), 1);
    d.to_percent = sqlite3_column_int(s.get(), 2);
    d.action = sqlite_column_text(s.get(), 3);
    d.state = sqlite_column_text(s.get(), 4);
    d.by = sqlite_column_text(s.get(), 5);
    d.reasons_json = sqlite_column_text(s.get(), 6);
    d.figures_json = sqlite_column_text(s.get(), 7);
    out.push_back(std::move(d));
  }
  if (rc != SQLITE_DONE) return Status::error(std::string("audit: ") + sqlite3_errmsg(db_));
  return out;
}

}  // namespace ds
