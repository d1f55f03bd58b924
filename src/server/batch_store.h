#pragma once
// The Batch API's stored state under --store-dir: uploaded files (their bytes
// in DIR/files/, written under a temporary name, synced, then renamed; their
// rows in DIR/batches.sqlite), batches, and each batch's lines with the
// result of every line that has finished. A line's result is committed the
// moment it ends, so a batch resumes after a kill without running a finished
// line twice. The output and error files are written when the batch ends,
// then recorded with its final status in one transaction; a file left on
// disk without its row (a kill in between) is removed at the next open.
// Every query names the tenant: another tenant's id is not found.
//
//   create ──► in_progress ──(every line has a result)──► completed
//                  │ cancel ──► cancelling ──(lines in flight end)──► cancelled
//                  └ past expires_at ──► expired (lines not run: errors)

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

struct sqlite3;

namespace ds {

struct StoredFile {
  std::string id, filename, purpose;
  int64_t bytes = 0, created_at = 0;
};

struct BatchRecord {
  std::string id, endpoint, input_file_id, completion_window, status;
  std::string output_file_id, error_file_id;  // empty: none
  std::string metadata_json = "null";
  int64_t created_at = 0, expires_at = 0;
  // 0: not (yet) reached.
  int64_t in_progress_at = 0, finalizing_at = 0, completed_at = 0, expired_at = 0, cancelling_at = 0, cancelled_at = 0;
  int64_t total = 0, completed = 0, failed = 0;
};

// One line of an input file, as the batch was created: a request to run, or
// (when the line was malformed) its error record already.
struct NewBatchLine {
  std::string custom_id, body;
  std::optional<std::string> error_record;
};

// A line to run.
struct PendingLine {
  std::string batch_id, tenant, url, custom_id, body;
  int64_t index = 0;
  std::string request_id() const;  // batch_req_<batch>_<index>: the line's id in its output and the access log
};

// What every request id of a batch's lines begins with.
std::string batch_request_prefix(const std::string& batch_id);

class BatchStore {
 public:
  static Result<std::unique_ptr<BatchStore>> open(const std::string& dir);
  ~BatchStore();

  Result<StoredFile> add_file(const std::string& tenant, const std::string& filename, const std::string& purpose, const std::string& content);
  // What a tenant stores: its files' bytes and its batches' lines (requests and results).
  int64_t tenant_bytes(const std::string& tenant);
  std::optional<StoredFile> file(const std::string& tenant, const std::string& id);
  std::optional<std::string> file_content(const std::string& tenant, const std::string& id);
  // Newest first (or oldest with ascending), after the id `after` when given.
  std::vector<StoredFile> list_files(const std::string& tenant, const std::string& purpose, const std::string& after, int64_t limit, bool ascending);
  bool remove_file(const std::string& tenant, const std::string& id);

  Status create_batch(const std::string& tenant, const BatchRecord& batch, const std::vector<NewBatchLine>& lines);
  std::optional<BatchRecord> batch(const std::string& tenant, const std::string& id);
  std::vector<BatchRecord> list_batches(const std::string& tenant, const std::string& after, int64_t limit);
  // in_progress -> cancelling; the batch as it is after, or nullopt when not found.
  std::optional<BatchRecord> cancel(const std::string& tenant, const std::string& id, int64_t now);

  // For the runner (batch_runner.h), across tenants. Up to `limit` lines not
  // yet run of in_progress batches, oldest batch first.
  std::vector<PendingLine> pending_lines(int64_t limit);
  // A line's result (an output record when `ok`, else an error record); false
  // when it already had one.
  bool finish_line(const std::string& batch_id, int64_t index, bool ok, const std::string& record);
  // Batches ready to end, with the status each ends in: completed (no line
  // left), expired (past expires_at), cancelled (cancelling). The runner ends
  // one only once none of its lines is in flight.
  std::vector<std::pair<std::string, std::string>> batches_to_end(int64_t now);
  // Writes the output and error files and sets the final status; lines not run
  // of an expired batch get an error record each.
  Status end_batch(const std::string& batch_id, const std::string& status, int64_t now);

 private:
  BatchStore(sqlite3* db, std::string dir) : db_(db), dir_(std::move(dir)) {}
  std::string file_path(const std::string& id) const { return dir_ + "/files/" + id; }
  // Writes `content` (or the records of a batch's lines) as a file's bytes: temporary name, fsync, rename.
  Status write_file(const std::string& id, const std::string& content);
  Result<int64_t> write_records(const std::string& id, const std::string& batch_id, bool ok);
  Status insert_file_row(const std::string& tenant, const StoredFile& file);
  void remove_orphans();

  sqlite3* db_;
  std::string dir_;
  std::mutex mutex_;  // one connection, one user at a time
};


}  // namespace ds
