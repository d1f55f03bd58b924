#include "server/batch_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/fd_io.h"
#include "base/random_id.h"
#include "base/sqlite.h"
#include "base/unix_time.h"

namespace ds {
namespace {

constexpr const char* k_schema = R"sql(
CREATE TABLE IF NOT EXISTS files (
  tenant TEXT NOT NULL,
  id TEXT NOT NULL PRIMARY KEY,
  filename TEXT NOT NULL,
  purpose TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  created INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS files_by_tenant ON files(tenant, created);
CREATE TABLE IF NOT EXISTS batches (
  tenant TEXT NOT NULL,
  id TEXT NOT NULL PRIMARY KEY,
  endpoint TEXT NOT NULL,
  input_file_id TEXT NOT NULL,
  completion_window TEXT NOT NULL,
  status TEXT NOT NULL,
  output_file_id TEXT NOT NULL DEFAULT '',
  error_file_id TEXT NOT NULL DEFAULT '',
  metadata TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  in_progress_at INTEGER NOT NULL DEFAULT 0,
  finalizing_at INTEGER NOT NULL DEFAULT 0,
  completed_at INTEGER NOT NULL DEFAULT 0,
  expired_at INTEGER NOT NULL DEFAULT 0,
  cancelling_at INTEGER NOT NULL DEFAULT 0,
  cancelled_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_by_tenant ON batches(tenant, created_at);
CREATE INDEX IF NOT EXISTS batches_by_status ON batches(status, created_at);
CREATE TABLE IF NOT EXISTS batch_lines (
  batch_id TEXT NOT NULL,
  idx INTEGER NOT NULL,
  custom_id TEXT NOT NULL,
  body TEXT NOT NULL,
  result TEXT,
  ok INTEGER,
  PRIMARY KEY (batch_id, idx)
);
)sql";

const char* k_batch_columns =
    "id, endpoint, input_file_id, completion_window, status, output_file_id, error_file_id, metadata, created_at, expires_at, "
    "in_progress_at, finalizing_at, completed_at, expired_at, cancelling_at, cancelled_at, "
    "(SELECT COUNT(*) FROM batch_lines WHERE batch_id = batches.id), "
    "(SELECT COUNT(*) FROM batch_lines WHERE batch_id = batches.id AND ok = 1), "
    "(SELECT COUNT(*) FROM batch_lines WHERE batch_id = batches.id AND ok = 0)";

BatchRecord batch_from(sqlite3_stmt* s) {
  BatchRecord b;
  int c = 0;
  for (std::string* text : {&b.id, &b.endpoint, &b.input_file_id, &b.completion_window, &b.status, &b.output_file_id, &b.error_file_id,
                            &b.metadata_json}) {
    *text = sqlite_column_text(s, c++);
  }
  for (int64_t* number : {&b.created_at, &b.expires_at, &b.in_progress_at, &b.finalizing_at, &b.completed_at, &b.expired_at,
                          &b.cancelling_at, &b.cancelled_at, &b.total, &b.completed, &b.failed}) {
    *number = sqlite3_column_int64(s, c++);
  }
  return b;
}

StoredFile file_from(sqlite3_stmt* s) {
  return StoredFile{sqlite_column_text(s, 0), sqlite_column_text(s, 1), sqlite_column_text(s, 2), sqlite3_column_int64(s, 3),
                    sqlite3_column_int64(s, 4)};
}

Status sql_error(sqlite3* db) { return Status::error(std::string("batch store: ") + sqlite3_errmsg(db)); }

// BEGIN ... COMMIT, rolled back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) { sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); }
  ~Transaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  bool commit() {
    done_ = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK;
    return done_;
  }

 private:
  sqlite3* db_;
  bool done_ = false;
};

bool step_done(SqliteStatement& s) { return s.ok() && sqlite3_step(s.get()) == SQLITE_DONE; }

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string batch_request_prefix(const std::string& batch_id) { return "batch_req_" + batch_id.substr(batch_id.find('_') + 1) + "_"; }

std::string PendingLine::request_id() const { return batch_request_prefix(batch_id) + std::to_string(index); }

Result<std::unique_ptr<BatchStore>> BatchStore::open(const std::string& dir) {
  for (const std::string& d : {dir, dir + "/files"}) {
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return Status::error("--store-dir " + d + ": " + std::strerror(errno));
  }
  auto db = open_sqlite_wal(dir + "/batches.sqlite", k_schema);
  if (!db.ok()) return Status::error("--store-dir: " + db.message());
  auto store = std::unique_ptr<BatchStore>(new BatchStore(db.value(), dir));
  store->remove_orphans();
  return store;
}

BatchStore::~BatchStore() { sqlite3_close(db_); }

// Files on disk without a row: a kill between the rename and the commit, or a temporary file.
void BatchStore::remove_orphans() {
  std::set<std::string> known;
  SqliteStatement s(db_, "SELECT id FROM files");
  while (s.ok() && sqlite3_step(s.get()) == SQLITE_ROW) known.insert(sqlite_column_text(s.get(), 0));
  DIR* listing = opendir((dir_ + "/files").c_str());
  if (!listing) return;
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != ".." && !known.count(name)) ::unlink(file_path(name).c_str());
  }
  closedir(listing);
}

Status BatchStore::write_file(const std::string& id, const std::string& content) {
  const std::string path = file_path(id), temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Status::error("cannot write " + temporary + ": " + std::strerror(errno));
  if (!write_fully(fd, content.data(), content.size())) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    ::unlink(temporary.c_str());
    return Status::error("cannot write " + temporary + ": " + error);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    return Status::error("cannot store " + path + ": " + std::strerror(errno));
  }
  sync_directory(dir_ + "/files");
  return Status();
}

Status BatchStore::insert_file_row(const std::string& tenant, const StoredFile& f) {
  SqliteStatement s(db_, "INSERT INTO files (tenant, id, filename, purpose, bytes, created) VALUES (?, ?, ?, ?, ?, ?)");
  s.bind_all(tenant, f.id, f.filename, f.purpose, f.bytes, f.created_at);
  return step_done(s) ? Status() : sql_error(db_);
}

Result<StoredFile> BatchStore::add_file(const std::string& tenant, const std::string& filename, const std::string& purpose,
                                         const std::string& content) {
  StoredFile f{random_id("file-"), filename, purpose, int64_t(content.size()), unix_seconds()};
  if (Status written = write_file(f.id, content); !written.ok()) return written;
  std::lock_guard lock(mutex_);
  if (Status inserted = insert_file_row(tenant, f); !inserted.ok()) {
    ::unlink(file_path(f.id).c_str());
    return inserted;
  }
  return f;
}

std::optional<StoredFile> BatchStore::file(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_, "SELECT id, filename, purpose, bytes, created FROM files WHERE tenant = ? AND id = ?");
  s.bind_all(tenant, id);
  if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) return std::nullopt;
  return file_from(s.get());
}

int64_t BatchStore::tenant_bytes(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_,
                    "SELECT (SELECT COALESCE(SUM(bytes), 0) FROM files WHERE tenant = ?) + "
                    "(SELECT COALESCE(SUM(length(CAST(body AS BLOB)) + COALESCE(length(CAST(result AS BLOB)), 0)), 0) FROM batch_lines "
                    "WHERE batch_id IN (SELECT id FROM batches WHERE tenant = ?))");
  s.bind_all(tenant, tenant);
  if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) return 0;
  return sqlite3_column_int64(s.get(), 0);
}

std::optional<std::string> BatchStore::file_content(const std::string& tenant, const std::string& id) {
  if (!file(tenant, id)) return std::nullopt;
  std::ifstream in(file_path(id), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::vector<StoredFile> BatchStore::list_files(const std::string& tenant, const std::string& purpose, const std::string& after, int64_t limit,
                                               bool ascending) {
  std::lock_guard lock(mutex_);
  const std::string sql = std::string("SELECT id, filename, purpose, bytes, created FROM files WHERE tenant = ? AND (? = '' OR purpose = ?) ") +
                          "AND (? = '' OR rowid " + (ascending ? ">" : "<") + " (SELECT rowid FROM files WHERE tenant = ? AND id = ?)) " +
                          "ORDER BY rowid " + (ascending ? "ASC" : "DESC") + " LIMIT ?";
  SqliteStatement s(db_, sql.c_str());
  s.bind_all(tenant, purpose, purpose, after, tenant, after, limit);
  std::vector<StoredFile> files;
  while (s.ok() && sqlite3_step(s.get()) == SQLITE_ROW) files.push_back(file_from(s.get()));
  return files;
}

bool BatchStore::remove_file(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_, "DELETE FROM files WHERE tenant = ? AND id = ?");
  s.bind_all(tenant, id);
  if (!step_done(s) || sqlite3_changes(db_) == 0) return false;
  ::unlink(file_path(id).c_str());  // after the row: a kill in between leaves an orphan, removed at open
  return true;
}

Status BatchStore::create_batch(const std::string& tenant, const BatchRecord& b, const std::vector<NewBatchLine>& lines) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  SqliteStatement s(db_, "INSERT INTO batches (tenant, id, endpoint, input_file_id, completion_window, status, metadata, created_at, expires_at, "
                         "in_progress_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind_all(tenant, b.id, b.endpoint, b.input_file_id, b.completion_window, b.status, b.metadata_json, b.created_at, b.expires_at,
             b.in_progress_at);
  if (!step_done(s)) return sql_error(db_);
  for (size_t i = 0; i < lines.size(); ++i) {
    const NewBatchLine& line = lines[i];
    SqliteStatement l(db_, "INSERT INTO batch_lines (batch_id, idx, custom_id, body, result, ok) VALUES (?, ?, ?, ?, ?, ?)");
    const std::optional<int64_t> ok = line.error_record ? std::optional<int64_t>(0) : std::nullopt;
    l.bind_all(b.id, int64_t(i), line.custom_id, line.body, line.error_record, ok);
    if (!step_done(l)) return sql_error(db_);
  }
  return transaction.commit() ? Status() : sql_error(db_);
}

std::optional<BatchRecord> BatchStore::batch(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  const std::string sql = std::string("SELECT ") + k_batch_columns + " FROM batches WHERE tenant = ? AND id = ?";
  SqliteStatement s(db_, sql.c_str());
  s.bind_all(tenant, id);
  if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) return std::nullopt;
  return batch_from(s.get());
}

std::vector<BatchRecord> BatchStore::list_batches(const std::string& tenant, const std::string& after, int64_t limit) {
  std::lock_guard lock(mutex_);
  const std::string sql = std::string("SELECT ") + k_batch_columns +
                          " FROM batches WHERE tenant = ? AND (? = '' OR rowid < (SELECT rowid FROM batches WHERE tenant = ? AND id = ?)) "
                          "ORDER BY rowid DESC LIMIT ?";
  SqliteStatement s(db_, sql.c_str());
  s.bind_all(tenant, after, tenant, after, limit);
  std::vector<BatchRecord> batches;
  while (s.ok() && sqlite3_step(s.get()) == SQLITE_ROW) batches.push_back(batch_from(s.get()));
  return batches;
}

std::optional<BatchRecord> BatchStore::cancel(const std::string& tenant, const std::string& id, int64_t now) {
  {
    std::lock_guard lock(mutex_);
    SqliteStatement s(db_, "UPDATE batches SET status = 'cancelling', cancelling_at = ? WHERE tenant = ? AND id = ? AND status = 'in_progress'");
    s.bind_all(now, tenant, id);
    if (!step_done(s)) return std::nullopt;
  }
  return batch(tenant, id);
}

std::vector<PendingLine> BatchStore::pending_lines(int64_t limit) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_, "SELECT b.id, b.tenant, b.endpoint, l.custom_id, l.body, l.idx FROM batches b JOIN batch_lines l ON l.batch_id = b.id "
                         "WHERE b.status = 'in_progress' AND l.result IS NULL ORDER BY b.created_at, b.rowid, l.idx LIMIT ?");
  s.bind(limit);
  std::vector<PendingLine> lines;
  while (s.ok() && sqlite3_step(s.get()) == SQLITE_ROW) {
    lines.push_back(PendingLine{sqlite_column_text(s.get(), 0), sqlite_column_text(s.get(), 1), sqlite_column_text(s.get(), 2),
                                sqlite_column_text(s.get(), 3), sqlite_column_text(s.get(), 4), sqlite3_column_int64(s.get(), 5)});
  }
  return lines;
}

bool BatchStore::finish_line(const std::string& batch_id, int64_t index, bool ok, const std::string& record) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_, "UPDATE batch_lines SET result = ?, ok = ? WHERE batch_id = ? AND idx = ? AND result IS NULL");
  s.bind_all(record, int64_t(ok), batch_id, index);
  return step_done(s) && sqlite3_changes(db_) > 0;
}

std::vector<std::pair<std::string, std::string>> BatchStore::batches_to_end(int64_t now) {
  std::lock_guard lock(mutex_);
  SqliteStatement s(db_, "SELECT id, CASE WHEN status = 'cancelling' THEN 'cancelled' WHEN expires_at <= ? THEN 'expired' ELSE 'completed' END "
                         "FROM batches WHERE status = 'cancelling' OR (status = 'in_progress' AND (expires_at <= ? OR NOT EXISTS "
                         "(SELECT 1 FROM batch_lines WHERE batch_id = batches.id AND result IS NULL))) ORDER BY created_at");
  s.bind_all(now, now);
  std::vector<std::pair<std::string, std::string>> ready;
  while (s.ok() && sqlite3_step(s.get()) == SQLITE_ROW) ready.emplace_back(sqlite_column_text(s.get(), 0), sqlite_column_text(s.get(), 1));
  return ready;
}

Result<int64_t> BatchStore::write_records(const std::string& id, const std::string& batch_id, bool ok) {
  std::string content;
  {
    std::lock_guard lock(mutex_);
    SqliteStatement s(db_, "SELECT result FROM batch_lines WHERE batch_id = ? AND ok = ? ORDER BY idx");
    s.bind_all(batch_id, int64_t(ok));
    while (s.ok() && sqlite3_step(s.get()) == SQLITE_ROW) content += sqlite_column_text(s.get(), 0) + "\n";
  }
  if (content.empty()) return int64_t(-1);  // no such line: no file
  if (Status written = write_file(id, content); !written.ok()) return written;
  return int64_t(content.size());
}

Status BatchStore::end_batch(const std::string& batch_id, const std::string& status, int64_t now) {
  std::string tenant;
  {
    std::lock_guard lock(mutex_);
    SqliteStatement t(db_, "SELECT tenant FROM batches WHERE id = ?");
    t.bind(batch_id);
    if (!t.ok() || sqlite3_step(t.get()) != SQLITE_ROW) return Status::error("no batch " + batch_id);
    tenant = sqlite_column_text(t.get(), 0);
    if (status == "expired") {  // what was not run is answered with the window's end
      Transaction transaction(db_);
      SqliteStatement pending(db_, "SELECT idx, custom_id FROM batch_lines WHERE batch_id = ? AND result IS NULL");
      pending.bind(batch_id);
      std::vector<std::pair<int64_t, std::string>> lines;
      while (pending.ok() && sqlite3_step(pending.get()) == SQLITE_ROW) lines.emplace_back(sqlite3_column_int64(pending.get(), 0), sqlite_column_text(pending.get(), 1));
      for (const auto& [index, custom_id] : lines) {
        const PendingLine line{batch_id, tenant, "", custom_id, "", index};
        const nlohmann::json record = {{"id", line.request_id()}, {"custom_id", custom_id}, {"response", nullptr},
                                       {"error", {{"code", "batch_expired"}, {"message", "this line was not run within the batch's completion_window"}}}};
        SqliteStatement u(db_, "UPDATE batch_lines SET result = ?, ok = 0 WHERE batch_id = ? AND idx = ?");
        u.bind_all(record.dump(), batch_id, index);
        if (!step_done(u)) return sql_error(db_);
      }
      if (!transaction.commit()) return sql_error(db_);
    }
  }
  StoredFile output{random_id("file-"), batch_id + "_output.jsonl", "batch_output", 0, now};
  StoredFile errors{random_id("file-"), batch_id + "_error.jsonl", "batch_output", 0, now};
  auto output_bytes = write_records(output.id, batch_id, true);
  if (!output_bytes.ok()) return output_bytes.status();
  auto error_bytes = write_records(errors.id, batch_id, false);
  if (!error_bytes.ok()) return error_bytes.status();
  output.bytes = output_bytes.value();
  errors.bytes = error_bytes.value();
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  for (const StoredFile* f : {&output, &errors}) {
    if (f->bytes < 0) continue;
    if (Status inserted = insert_file_row(tenant, *f); !inserted.ok()) return inserted;
  }
  const std::string at_column = status == "completed" ? "completed_at" : status == "expired" ? "expired_at" : "cancelled_at";
  const std::string sql = "UPDATE batches SET status = ?, output_file_id = ?, error_file_id = ?, finalizing_at = ?, " + at_column +
                          " = ? WHERE id = ? AND status IN ('in_progress', 'cancelling')";
  SqliteStatement u(db_, sql.c_str());
  u.bind_all(status, output.bytes >= 0 ? output.id : std::string(), errors.bytes >= 0 ? errors.id : std::string(), now, now, batch_id);
  if (!step_done(u)) return sql_error(db_);
  return transaction.commit() ? Status() : sql_error(db_);
}

}  // namespace ds
