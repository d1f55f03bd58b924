#pragma once
// The serving engine: a step loop on its own thread around EngineCore.
// submit() and cancel() are thread-safe and return at once; the engine thread
// is the only one that touches the model, the pages and the scheduler
// (STYLE.md practice 2). admit() answers, on any thread, whether a request
// fits (admission_rule.h); each request's tokens come back through its
// RequestStream as the UTF-8-safe text the core decided (stop strings held
// back until they cannot be a stop).

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/admission_rule.h"
#include "engine/engine_core.h"
#include "engine/request_stream.h"

namespace ds {

class Engine {
 public:
  Engine(Model& model, KvCache& memory, const EngineCoreConfig& config, const Tokenizer& tokenizer);
  ~Engine();  // finishes the step in flight, then stops; open streams end as cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Whether a request may run, asked before submit(): fits, never fits (the
  // context or the KV pool is too small for it), or not now (the pool is too
  // full), with the figures; from the pages free after the last step.
  Admit admit(const std::vector<int32_t>& prompt, const GenerationParams& params) const;
  // The same before tokenizing, for a prompt of at least n_prompt tokens:
  // fits or never fits.
  Admit admit_at_least(int64_t n_prompt, const GenerationParams& params) const;
  // Prompt plus output, tokens.
  int64_t max_context() const { return rule_.max_context(); }

  // Queues a request. A request that can never run ends at once with finish
  // = error and the reason in `error`.
  std::shared_ptr<RequestStream> submit(EngineRequest request);
  // Ends a request within one step and frees its pages; unknown ids are ignored.
  void cancel(int64_t id);
  // The engine's statistics as of the last step (thread-safe).
  EngineStats stats() const;

  // For the watchdog, answered without waiting on the engine thread: whether
  // it has work, how long since it last made progress (finished a step, or
  // took work while idle), and the longest step it has taken.
  struct Progress {
    bool busy = false;
    double seconds_without_progress = 0.0;
    double longest_step_seconds = 0.0;
  };
  Progress progress() const;

  // The profiler of this engine's steps (step_trace.h): start() it to record
  // a Chrome trace; its per-op totals are thread-safe to read.
  StepTrace& trace() { return core_.trace(); }

  // A test hook (serve's POST /admin/debug): every step waits this long
  // first, so an engine can be made slow on purpose (the router's latency
  // rule, the watchdog). 0: none.
  void set_debug_step_delay(std::chrono::milliseconds delay) { debug_step_delay_ms_ = delay.count(); }
  // Another (the same endpoint): while on, every step with work fails as a
  // forward that failed would, ending its requests with an engine error (the
  // router's passive failure rule).
  void set_debug_fail_steps(bool fail) { debug_fail_steps_ = fail; }

 private:
  void loop();
  void take_work();
  void deliver(const StepOutput& output);

  EngineCore core_;
  const AdmissionRule rule_;  // a copy of the core's: immutable, so any thread may ask it

  mutable std::mutex mutex_;  // guards the four members below
  std::condition_variable work_;
  std::vector<std::pair<EngineRequest, std::shared_ptr<RequestStream>>> submitted_;
  std::vector<int64_t> cancelled_;
  bool stopping_ = false;
  EngineStats stats_;

  KvDiskTier* kv_disk_;  // the core's disk tier, or null: its own lock, read by stats()
  std::atomic<int64_t> next_id_{1};
  std::atomic<bool> busy_{false};
  std::atomic<int64_t> progress_ns_{0}, longest_step_ns_{0};  // steady-clock nanoseconds
  std::atomic<int64_t> debug_step_delay_ms_{0};
  std::atomic<bool> debug_fail_steps_{false};
  std::unordered_map<int64_t, std::shared_ptr<RequestStream>> live_;  // by core id; engine thread only
  std::unordered_map<int64_t, int64_t> core_id_of_;  // stream id -> core id; engine thread only
  std::thread thread_;
};

}  // namespace ds
