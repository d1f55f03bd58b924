#pragma once
// What the stores on SQLite (the router's audit log, the server's response
// store) share: opening a database in WAL mode with its schema, and a prepared
// statement with typed binding in parameter order. Header-only; its users link SQLite.

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace ds {

// Opens (creating) `path` and runs `schema`. WAL: readers and the writer never
// wait for each other, and a kill of the process at any moment leaves the
// file consistent with every committed transaction; synchronous=NORMAL: a
// power cut may lose the last transactions, never the file.
inline Result<sqlite3*> open_sqlite_wal(const std::string& path, const char* schema) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    const std::string error = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::error("cannot open '" + path + "': " + error);
  }
  char* error = nullptr;
  const std::string setup = std::string("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;") + schema;
  if (sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error ? error : "?";
    sqlite3_free(error);
    sqlite3_close(db);
    return Status::error("'" + path + "': " + message);
  }
  return db;
}

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~SqliteStatement() { sqlite3_finalize(s_); }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;
  bool ok() const { return s_ != nullptr; }
  sqlite3_stmt* get() const { return s_; }
  int next = 1;  // the next parameter's index

  void bind(const std::string& v) { sqlite3_bind_text(s_, next++, v.data(), int(v.size()), SQLITE_TRANSIENT); }
  void bind(int64_t v) { sqlite3_bind_int64(s_, next++, v); }
  void bind(double v) { sqlite3_bind_double(s_, next++, v); }
  template <typename T>
  void bind(const std::optional<T>& v) {
    if (v) return bind(*v);
    sqlite3_bind_null(s_, next++);
  }
  // The next parameters, in order.
  template <typename... T>
  void bind_all(const T&... v) {
    (bind(v), ...);
  }

 private:
  sqlite3_stmt* s_ = nullptr;
};

inline std::string sqlite_column_text(sqlite3_stmt* s, int i) {
  const auto* text = sqlite3_column_text(s, i);
  return text ? reinterpret_cast<const char*>(text) : "";
}

}  // namespace ds
