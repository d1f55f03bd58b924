#pragma once
// The engine's profiler: timed spans of one engine thread — each step, its
// stages (schedule, batch, forward, sample, deliver), each layer and each op
// (matmul by weight type, attention, MoE routing and experts, ...) — written
// as a Chrome trace (chrome://tracing, ui.perfetto.dev: JSON array format,
// "X" events, microseconds), with per-op totals kept for /metrics.
//
// Recorded only while on: start() asks for the next N steps (or every step)
// into a file; the engine thread takes the request at its next step. Off, a
// TraceScope is one pointer and one flag test. The file's closing bracket is
// written when the recording ends; a process killed mid-recording leaves an
// unclosed array, which both viewers accept.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

class StepTrace {
 public:
  StepTrace() = default;
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  // Thread-safe. Records the next `n_steps` steps (-1: every step until the
  // engine stops) into `path`; refused while a recording is asked or running.
  Status start(const std::string& path, int64_t n_steps);
  // Leaf spans' seconds by op ("matmul q8_0", "attention", ...) over every
  // traced step, and how many steps were traced. Thread-safe.
  std::vector<std::pair<std::string, double>> op_seconds() const;
  int64_t traced_steps() const;

  // The engine thread's side. begin_step takes a pending start(); spans are
  // recorded between it and end_step only if this step is traced.
  void begin_step();
  void end_step(int64_t n_tokens, int64_t n_sequences);
  bool on() const { return on_; }
  // `name` and `detail` (a weight type, a layer kind) must be static strings.
  void begin(const char* name, const char* detail);
  void end();

 private:
  struct Span {
    const char* name;
    const char* detail;
    int64_t begin_ns, end_ns;
    int depth;
    bool leaf;
  };
  void close_file();

  bool on_ = false;  // engine thread only
  std::vector<Span> spans_;  // this step's, engine thread only
  std::vector<size_t> open_;  // indices of the spans begun and not ended
  std::FILE* file_ = nullptr;
  int64_t steps_left_ = 0;  // -1: unbounded
  int64_t origin_ns_ = 0;

  mutable std::mutex mutex_;  // guards the four below
  std::optional<std::pair<std::string, int64_t>> requested_;
  bool recording_ = false;
  std::map<std::string, double> op_seconds_;
  int64_t traced_steps_ = 0;
  std::atomic<bool> pending_{false};
};

// A span for the scope's lifetime when `trace` is recording this step.
class TraceScope {
 public:
  TraceScope(StepTrace* trace, const char* name, const char* detail = nullptr) : trace_(trace && trace->on() ? trace : nullptr) {
    if (trace_) trace_->begin(name, detail);
  }
  ~TraceScope() {
    if (trace_) trace_->end();
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  StepTrace* trace_;
};

}  // namespace ds
