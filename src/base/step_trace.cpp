#include "base/step_trace.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ds {
namespace {

int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch() / std::chrono::nanoseconds(1); }

std::string op_key(const char* name, const char* detail) { return detail ? std::string(name) + " " + detail : std::string(name); }

}  // namespace

StepTrace::~StepTrace() { close_file(); }

Status StepTrace::start(const std::string& path, int64_t n_steps) {
  if (n_steps == 0 || n_steps < -1) return Status::error("a trace needs at least one step (or -1: every step)");
  std::lock_guard lock(mutex_);
  if (requested_ || recording_) return Status::error("a trace is already being recorded; one at a time");
  // Opened here, so a path that cannot be written is refused to the one asking.
  std::FILE* probe = std::fopen(path.c_str(), "w");
  if (!probe) return Status::error("cannot write the trace to '" + path + "': " + std::strerror(errno));
  std::fclose(probe);
  requested_.emplace(path, n_steps);
  pending_ = true;
  return Status();
}

std::vector<std::pair<std::string, double>> StepTrace::op_seconds() const {
  std::lock_guard lock(mutex_);
  return {op_seconds_.begin(), op_seconds_.end()};
}

int64_t StepTrace::traced_steps() const {
  std::lock_guard lock(mutex_);
  return traced_steps_;
}

void StepTrace::begin_step() {
  if (pending_.exchange(false)) {
    std::lock_guard lock(mutex_);
    if (requested_) {
      file_ = std::fopen(requested_->first.c_str(), "w");
      steps_left_ = requested_->second;
      requested_.reset();
      recording_ = file_ != nullptr;
      if (file_) {
        origin_ns_ = now_ns();
        std::fprintf(file_, "[\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"engine\"}}", int(getpid()));
      }
    }
  }
  on_ = file_ != nullptr;
  spans_.clear();
  open_.clear();
  if (on_) begin("step", nullptr);
}

void StepTrace::begin(const char* name, const char* detail) {
  if (!open_.empty()) spans_[open_.back()].leaf = false;
  open_.push_back(spans_.size());
  spans_.push_back({name, detail, now_ns(), 0, int(open_.size()) - 1, true});
}

void StepTrace::end() {
  spans_[open_.back()].end_ns = now_ns();
  open_.pop_back();
}

void StepTrace::end_step(int64_t n_tokens, int64_t n_sequences) {
  if (!on_) return;
  end();  // the step
  on_ = false;
  std::map<std::string, double> totals;
  for (const Span& s : spans_) {
    const double begin_us = double(s.begin_ns - origin_ns_) / 1e3, dur_us = double(s.end_ns - s.begin_ns) / 1e3;
    std::fprintf(file_, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":1", op_key(s.name, s.detail).c_str(),
                 s.depth == 0 ? "step" : s.leaf ? "op" : "stage", begin_us, dur_us, int(getpid()));
    if (s.depth == 0) std::fprintf(file_, ",\"args\":{\"tokens\":%lld,\"sequences\":%lld}", (long long)n_tokens, (long long)n_sequences);
    std::fputc('}', file_);
    if (s.leaf && s.depth > 0) totals[op_key(s.name, s.detail)] += double(s.end_ns - s.begin_ns) / 1e9;
  }
  {
    std::lock_guard lock(mutex_);
    for (const auto& [op, seconds] : totals) op_seconds_[op] += seconds;
    ++traced_steps_;
  }
  if (steps_left_ > 0 && --steps_left_ == 0) close_file();
}

void StepTrace::close_file() {
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
  std::lock_guard lock(mutex_);
  recording_ = false;
}

}  // namespace ds
