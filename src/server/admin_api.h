#pragma once
// The admin API, under its own keys (--admin-keys FILE: "KEY OPERATOR" lines,
// never a tenant's key):
//
//   POST /admin/trace    {"path": "FILE.json", "steps": N}: the serving engine's next N steps as a
//                        Chrome trace (step_trace.h); 409 while one is recorded
//   POST /admin/debug    {"step_delay_ms": N}: a test hook — every step of the serving engine waits N ms first
//   GET  /admin/models   the versions loaded: state, requests in flight, memory
//   POST /admin/models   {"path": "B.gguf", "version": "B", "mode": "both_loaded" | "drain_first",
//                         "check": {"prompt": "...", "expected_output": "..."},
//                         and any of serve's model options ("ctx_size": 2048, "no_mmap": true, ...)}
//
// A swap loads the new version beside the current one, in an engine that
// serves nobody; warms it (a forward through every layer: page faults taken,
// threads started) and checks it (finite log-probabilities; the greedy reply
// to check.prompt starts with check.expected_output when given); then new
// requests go to it. Requests running on the old version finish there, and
// its weights and KV pool are freed when the last one ends. A failed load,
// warm-up or check leaves the old version serving and the answer says why
// (422). Both versions must fit in memory at once — the new weights file and
// KV pool within MemAvailable less what the loaded versions hold — or the
// swap is refused with the figures (507), unless it asks for drain_first: new
// requests are then refused (503, Retry-After) while the old version finishes
// its requests and is freed, and the new one loads; if that fails, the old
// one is loaded again. One swap at a time (409); the POST is answered when it
// has ended, from the admin thread, never an I/O thread.

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/task_queue.h"
#include "engine/model_version.h"
#include "server/api_keys.h"

namespace ds {

// What one version is loaded from.
struct ModelLoadRequest {
  std::string path, label;
  // serve's model options as the request names them ("ctx_size" -> "2048"; booleans "true"/"false")
  std::vector<std::pair<std::string, std::string>> options;
  std::string check_prompt, expected_output;
};

// How versions are made (serve supplies it: it knows its flags).
struct ModelLoader {
  // The bytes a version would hold, and how to load it (load, warm up, check).
  struct Plan {
    int64_t weights_bytes = 0, kv_pool_bytes = 0;
    std::function<Result<std::shared_ptr<ModelVersion>>()> load;
  };
  // Whether every option is one a version can take (an error naming the first that is not).
  std::function<Status(const ModelLoadRequest&)> validate;
  // Reads the file's header and sizes the version, allocating nothing.
  std::function<Result<Plan>(const ModelLoadRequest&)> plan;
};

// A label fit for a header and a log line: 1 to 64 of [A-Za-z0-9._:+-].
bool valid_version_label(const std::string& label);
// `text` made such a label: other characters become '_', cut to 64 ("model" if empty).
std::string version_label_from(const std::string& text);

struct AdminAnswer {
  int status = 200;
  std::string body;  // JSON
};

class AdminApi {
 public:
  // `first` is what the serving version was loaded from (a drain-first swap may load it again);
  // `drain_timeout`: how long a drain-first swap waits for the old version's requests.
  AdminApi(ModelVersions& versions, ModelLoader loader, KeyFile keys, ModelLoadRequest first, std::chrono::milliseconds drain_timeout);

  // The operator an Authorization header's key belongs to, or nullopt.
  std::optional<std::string> operator_of(const std::string& authorization) const { return keys_.name_of(authorization); }
  AdminAnswer list() const;
  AdminAnswer trace(const std::string& body);
  AdminAnswer debug(const std::string& body);
  // Parses the body; a bad one, or a swap while another runs, is answered at
  // once; else the swap runs on the admin thread, which calls `done`.
  void swap(const std::string& body, const std::string& who, std::function<void(AdminAnswer)> done);
  // Seconds a client refused during a drain-first swap should wait.
  int retry_after_seconds() const { return retry_after_seconds_; }

 private:
  AdminAnswer run_swap(const ModelLoadRequest& request, bool drain_first, const std::string& who);
  AdminAnswer swap_beside(const ModelLoadRequest& request, std::chrono::steady_clock::time_point started);
  AdminAnswer swap_after_drain(const ModelLoadRequest& request, std::chrono::steady_clock::time_point started);
  // MemAvailable less what the loaded versions hold or may still take (mapped weights, KV pools).
  int64_t memory_held_by_versions() const;
  void set_state(const std::string& state, const std::string& label);

  ModelVersions& versions_;
  ModelLoader loader_;
  KeyFile keys_;
  std::chrono::milliseconds drain_timeout_;
  ModelLoadRequest serving_from_;  // what the current version was loaded from; admin thread only after construction
  std::atomic<bool> swapping_{false};
  std::atomic<int> retry_after_seconds_{1};
  mutable std::mutex state_mutex_;  // guards the three below
  std::string swap_state_ = "idle", swap_label_;  // idle | loading | draining, and the version it concerns
  std::string last_swap_;  // the last swap's answer, JSON, for GET
  TaskQueue worker_{1, 1};  // last: its thread stops before the members it uses go
};

}  // namespace ds
