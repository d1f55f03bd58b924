#include "engine/engine.h"

#include <chrono>

namespace ds {

Engine::Engine(Model& model, KvCache& memory, const EngineCoreConfig& config, const Tokenizer& tokenizer)
    : core_(model, memory, config, &tokenizer),
      rule_(core_.admission_rule()),
      stats_(core_.stats()),
      kv_disk_(config.kv_disk),
      thread_([this] { loop(); }) {}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
  for (auto& [id, stream] : live_) stream->push(StreamEvent::ending(FinishReason::cancelled));
  for (auto& [request, stream] : submitted_) stream->push(StreamEvent::ending(FinishReason::cancelled));
}

std::shared_ptr<RequestStream> Engine::submit(EngineRequest request) {
  auto stream = std::make_shared<RequestStream>(next_id_++);
  {
    std::lock_guard lock(mutex_);
    core_.request_yield(request.params.priority);
    submitted_.emplace_back(std::move(request), stream);
  }
  work_.notify_all();
  return stream;
}

Admit Engine::admit(const std::vector<int32_t>& prompt, const GenerationParams& params) const {
  int64_t n_free = 0, n_free_window = 0;
  {
    std::lock_guard lock(mutex_);
    n_free = stats_.pages_total - stats_.pages_held;
    n_free_window = stats_.window_pages_total - stats_.window_pages_held;
  }
  return rule_.check(int64_t(prompt.size()), params.max_tokens, n_free, false, n_free_window);
}

Admit Engine::admit_at_least(int64_t n_prompt, const GenerationParams& params) const {
  return rule_.check(n_prompt, params.max_tokens, -1, true);
}

EngineStats Engine::stats() const {
  EngineStats stats;
  {
    std::lock_guard lock(mutex_);
    stats = stats_;
  }
  // The tier's writer moves on between steps: its counters are read now, not at the last step.
  if (kv_disk_) stats.kv_disk = kv_disk_->stats();
  return stats;
}

void Engine::cancel(int64_t id) {
  {
    std::lock_guard lock(mutex_);
    cancelled_.push_back(id);
  }
  work_.notify_all();
}

// Moves new requests into the core and applies cancellations; waits when
// there is nothing at all to do.
void Engine::take_work() {
  std::vector<std::pair<EngineRequest, std::shared_ptr<RequestStream>>> submitted;
  std::vector<int64_t> cancelled;
  {
    std::unique_lock lock(mutex_);
    work_.wait(lock, [&] { return stopping_ || !submitted_.empty() || !cancelled_.empty() || !core_.idle(); });
    submitted.swap(submitted_);
    cancelled.swap(cancelled_);
  }
  for (auto& [request, stream] : submitted) {
    auto id = core_.add(std::move(request.prompt), request.params);
    if (!id.ok()) {
      stream->push(StreamEvent::ending(FinishReason::error, id.message()));
      continue;
    }
    core_id_of_[stream->id()] = id.value();
    live_.emplace(id.value(), stream);
  }
  for (int64_t stream_id : cancelled) {
    auto it = core_id_of_.find(stream_id);
    if (it != core_id_of_.end()) core_.cancel(it->second);
  }
}

void Engine::deliver(const StepOutput& output) {
  auto it = live_.find(output.id);
  if (it == live_.end()) return;
  const std::shared_ptr<RequestStream> stream = it->second;
  StreamEvent event;
  event.finish = output.finish;
  event.text = output.text;
  event.stop_string = output.stop_string;
  event.prompt_logprobs = output.prompt_logprobs;
  event.embedding = output.embedding;
  event.metrics = output.metrics;
  if (output.in_reply) {
    event.tokens.push_back(output.token);
    if (output.logprobs) event.logprobs.push_back(*output.logprobs);
  }
  if (event.finish != FinishReason::none) {
    core_id_of_.erase(stream->id());
    live_.erase(it);
    stream->push(std::move(event));
    return;
  }
  if (!event.text.empty() || !event.tokens.empty() || !event.prompt_logprobs.empty()) stream->push(std::move(event));
}

namespace {
int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch() / std::chrono::nanoseconds(1); }
}  // namespace

Engine::Progress Engine::progress() const {
  Progress p;
  p.busy = busy_.load();
  if (p.busy) p.seconds_without_progress = double(now_ns() - progress_ns_.load()) / 1e9;
  p.longest_step_seconds = double(longest_step_ns_.load()) / 1e9;
  return p;
}

void Engine::loop() {
  for (;;) {
    take_work();
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (!busy_.load()) progress_ns_ = now_ns();  // work arrived after idling: the clock starts now
    busy_ = !core_.idle();
    const int64_t step_start = now_ns();
    if (const int64_t delay = debug_step_delay_ms_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    StepTrace& trace = core_.trace();
    trace.begin_step();
    auto outputs = debug_fail_steps_ && !core_.idle() ? Result<std::vector<StepOutput>>(Status::error("debug: the step failed on purpose"))
                                                      : core_.step();
    const int64_t step_end = now_ns();
    longest_step_ns_ = std::max(longest_step_ns_.load(), step_end - step_start);
    progress_ns_ = step_end;
    busy_ = !core_.idle();
    if (!outputs.ok()) {
      // A failed forward is an engine fault: every live request ends with it.
      for (auto& [id, stream] : live_) {
        stream->push(StreamEvent::ending(FinishReason::error, outputs.message()));
        core_.cancel(id);
      }
      live_.clear();
      core_id_of_.clear();
      trace.end_step(0, 0);
      continue;
    }
    // The stats admit() reads are published before the outputs: a client that
    // sends its next request on reading a finished one must find the pages
    // that request held already free.
    EngineStats stats;
    {
      TraceScope scope(&trace, "stats");
      stats = core_.stats();
      std::lock_guard lock(mutex_);
      stats_ = stats;
    }
    {
      TraceScope scope(&trace, "deliver");  // into the streams
      for (const StepOutput& output : outputs.value()) deliver(output);
    }
    trace.end_step(stats.last_step_tokens, stats.n_running);
  }
}

}  // namespace ds
