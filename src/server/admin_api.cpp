#include "server/admin_api.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/log.h"
#include "base/memory_size.h"

namespace ds {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

AdminAnswer error_answer(int status, const std::string& code, const std::string& message, const std::string& serving,
                         json extra = json::object()) {
  json error = {{"message", message}, {"type", status < 500 ? "invalid_request_error" : "server_error"}, {"code", code}};
  error.update(extra);
  return {status, dump(json{{"error", error}, {"serving", serving.empty() ? json(nullptr) : json(serving)}})};
}

std::string label_of(const std::shared_ptr<ModelVersion>& v) { return v ? v->label : ""; }

json phases_json(const ModelVersion& v) {
  json phases = json::object();
  for (const auto& [name, seconds] : v.load_phases) phases[name] = std::round(seconds * 1e4) / 1e4;
  return phases;
}

}  // namespace

namespace {
bool label_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == ':' || c == '+';
}
}  // namespace

bool valid_version_label(const std::string& label) {
  return !label.empty() && label.size() <= 64 && std::all_of(label.begin(), label.end(), label_char);
}

std::string version_label_from(const std::string& text) {
  std::string label = text.substr(0, 64);
  for (char& c : label) c = label_char(c) ? c : '_';
  return label.empty() ? "model" : label;
}

AdminApi::AdminApi(ModelVersions& versions, ModelLoader loader, KeyFile keys, ModelLoadRequest first,
                   std::chrono::milliseconds drain_timeout)
    : versions_(versions), loader_(std::move(loader)), keys_(std::move(keys)), drain_timeout_(drain_timeout),
      serving_from_(std::move(first)) {}

void AdminApi::set_state(const std::string& state, const std::string& label) {
  std::lock_guard lock(state_mutex_);
  swap_state_ = state;
  swap_label_ = label;
}

AdminAnswer AdminApi::list() const {
  json data = json::array();
  const auto current = versions_.current();
  for (const auto& v : versions_.live()) {
    data.push_back({{"version", v->label}, {"path", v->path}, {"state", v == current ? "serving" : "retiring"},
                    {"requests_in_flight", v->in_flight.load()}, {"weights_file_bytes", v->weight_file_bytes},
                    {"kv_pool_bytes", v->kv_pool_bytes}, {"max_model_len", v->engine->max_context()},
                    {"loaded_at", std::chrono::duration_cast<std::chrono::seconds>(v->loaded_at.time_since_epoch()).count()},
                    {"load_seconds", v->load_seconds}, {"load_phases", phases_json(*v)}});
  }
  json reply = {{"object", "list"}, {"data", data}, {"resident_memory_bytes", resident_memory_bytes()},
                {"memory_available_bytes", available_memory_bytes()}};
  std::lock_guard lock(state_mutex_);
  reply["swap"] = {{"state", swap_state_}, {"version", swap_label_.empty() ? json(nullptr) : json(swap_label_)}};
  reply["last_swap"] = last_swap_.empty() ? json(nullptr) : json::parse(last_swap_);
  return {200, dump(reply)};
}

AdminAnswer AdminApi::trace(const std::string& body) {
  const auto current = versions_.current();
  const std::string serving = label_of(current);
  const json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) return error_answer(400, "invalid_request", "the body must be a JSON object", serving);
  for (const auto& [key, value] : parsed.items()) {
    if (key != "path" && key != "steps") return error_answer(400, "invalid_request", "unknown field '" + key + "' (path, steps)", serving);
  }
  if (!parsed.contains("path") || !parsed["path"].is_string() || parsed["path"].get<std::string>().empty()) {
    return error_answer(400, "invalid_request", "'path' (the trace file to write) is required", serving);
  }
  if (!parsed.contains("steps") || !parsed["steps"].is_number_integer() || parsed["steps"].get<int64_t>() < 1 ||
      parsed["steps"].get<int64_t>() > 1000000) {
    return error_answer(400, "invalid_request", "'steps' must be an integer 1..1000000", serving);
  }
  if (!current) return error_answer(503, "unavailable", "no version is serving (a drain-first swap is running)", serving);
  const std::string path = parsed["path"];
  const int64_t steps = parsed["steps"];
  if (Status s = current->engine->trace().start(path, steps); !s.ok()) {
    return error_answer(s.message().find("already") != std::string::npos ? 409 : 400, "trace_refused", s.message(), serving);
  }
  DS_LOG_INFO("admin: tracing the next %lld steps of version '%s' into %s", (long long)steps, serving.c_str(), path.c_str());
  return {200, dump(json{{"path", path}, {"steps", steps}, {"version", serving}})};
}

AdminAnswer AdminApi::debug(const std::string& body) {
  const auto current = versions_.current();
  const std::string serving = label_of(current);
  const json parsed = json::parse(body, nullptr, false);
  const char* usage = "the body must be {\"step_delay_ms\": 0..600000} and/or {\"fail_steps\": true|false}";
  if (parsed.is_discarded() || !parsed.is_object() || parsed.empty()) return error_answer(400, "invalid_request", usage, serving);
  for (const auto& [key, value] : parsed.items()) {
    const bool valid = key == "step_delay_ms" ? value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= 600000
                       : key == "fail_steps"  ? value.is_boolean()
                                              : false;
    if (!valid) return error_answer(400, "invalid_request", std::string(usage) + " ('" + key.substr(0, 64) + "')", serving);
  }
  if (!current) return error_answer(503, "unavailable", "no version is serving (a drain-first swap is running)", serving);
  json answer = {{"version", serving}};
  if (parsed.contains("step_delay_ms")) {
    const int64_t delay = parsed["step_delay_ms"];
    current->engine->set_debug_step_delay(std::chrono::milliseconds(delay));
    DS_LOG_WARN("admin: test hook: every engine step of version '%s' now waits %lld ms", serving.c_str(), (long long)delay);
    answer["step_delay_ms"] = delay;
  }
  if (parsed.contains("fail_steps")) {
    const bool fail = parsed["fail_steps"];
    current->engine->set_debug_fail_steps(fail);
    DS_LOG_WARN("admin: test hook: the engine steps of version '%s' %s", serving.c_str(), fail ? "now fail" : "run again");
    answer["fail_steps"] = fail;
  }
  return {200, dump(answer)};
}

void AdminApi::swap(const std::string& body, const std::string& who, std::function<void(AdminAnswer)> done) {
  const std::string serving = label_of(versions_.current());
  const auto invalid = [&](const std::string& message) { done(error_answer(400, "invalid_request", message, serving)); };
  const json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) return invalid("the body must be a JSON object");
  ModelLoadRequest request;
  bool drain_first = false;
  for (const auto& [key, value] : parsed.items()) {
    if (key == "path" || key == "version") {
      if (!value.is_string()) return invalid("'" + key + "' must be a string");
      (key == "path" ? request.path : request.label) = value.get<std::string>();
    } else if (key == "mode") {
      if (value != "both_loaded" && value != "drain_first") return invalid("'mode' must be \"both_loaded\" or \"drain_first\"");
      drain_first = value == "drain_first";
    } else if (key == "check") {
      if (!value.is_object()) return invalid("'check' must be an object with 'prompt' and, optionally, 'expected_output'");
      for (const auto& [field, text] : value.items()) {
        if ((field != "prompt" && field != "expected_output") || !text.is_string()) {
          return invalid("'check." + field + "' is not a string field of check (prompt, expected_output)");
        }
        (field == "prompt" ? request.check_prompt : request.expected_output) = text.get<std::string>();
      }
      if (request.check_prompt.empty()) return invalid("'check.prompt' must be a non-empty string");
    } else if (value.is_string() || value.is_number() || value.is_boolean()) {
      request.options.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
    } else {
      return invalid("'" + key + "' must be a string, a number or a boolean");
    }
  }
  if (request.path.empty()) return invalid("'path' (the GGUF file to load) is required");
  if (!valid_version_label(request.label)) return invalid("'version' is required: 1 to 64 letters, digits or . _ - : +");
  for (const auto& v : versions_.live()) {
    if (v->label == request.label) return invalid("version '" + request.label + "' is already loaded; give the new one its own label");
  }
  if (Status s = loader_.validate(request); !s.ok()) return invalid(s.message());
  if (swapping_.exchange(true)) {
    std::lock_guard lock(state_mutex_);
    return done(error_answer(409, "swap_in_progress", "a swap to '" + swap_label_ + "' is running; one at a time", serving));
  }
  set_state("loading", request.label);
  const bool queued = worker_.try_post([this, request, drain_first, who, done] {
    const AdminAnswer answer = run_swap(request, drain_first, who);
    {
      std::lock_guard lock(state_mutex_);
      last_swap_ = answer.body;
      swap_state_ = "idle";
      swap_label_.clear();
    }
    swapping_ = false;
    done(answer);
  });
  if (!queued) {
    swapping_ = false;
    done(error_answer(503, "shutting_down", "the server is stopping", serving));
  }
}

AdminAnswer AdminApi::run_swap(const ModelLoadRequest& request, bool drain_first, const std::string& who) {
  const Clock::time_point started = Clock::now();
  DS_LOG_INFO("admin: %s swaps '%s' -> '%s' (%s, %s)", who.c_str(), label_of(versions_.current()).c_str(), request.label.c_str(),
              request.path.c_str(), drain_first ? "drain_first" : "both_loaded");
  const AdminAnswer answer = drain_first ? swap_after_drain(request, started) : swap_beside(request, started);
  DS_LOG_INFO("admin: swap to '%s' answered %d after %.2f s: %s", request.label.c_str(), answer.status, seconds_since(started),
              answer.body.c_str());
  return answer;
}

int64_t AdminApi::memory_held_by_versions() const {
  int64_t held = 0;
  for (const auto& v : versions_.live()) held += v->weight_file_bytes + v->kv_pool_bytes;
  return held;
}

AdminAnswer AdminApi::swap_beside(const ModelLoadRequest& request, Clock::time_point started) {
  const std::string serving = label_of(versions_.current());
  auto plan = loader_.plan(request);
  if (!plan.ok()) return error_answer(422, "load_failed", plan.message() + "; '" + serving + "' goes on serving", serving);
  const int64_t needed = plan.value().weights_bytes + plan.value().kv_pool_bytes;
  const int64_t available = available_memory_bytes(), held = memory_held_by_versions();
  // MemAvailable counts the loaded versions' mapped weights as reclaimable and
  // their untouched KV pages as free; both are theirs, so neither is offered.
  const int64_t free_beside = available - held;
  if (needed > free_beside) {
    return error_answer(507, "insufficient_memory",
                        "version '" + request.label + "' needs " + format_memory_size(needed) + " (weights " +
                            format_memory_size(plan.value().weights_bytes) + " + KV pool " +
                            format_memory_size(plan.value().kv_pool_bytes) + ") but only " + format_memory_size(std::max<int64_t>(free_beside, 0)) +
                            " is free beside the loaded versions (MemAvailable " + format_memory_size(available) + " less the " +
                            format_memory_size(held) + " they hold or may take); '" + serving +
                            "' goes on serving. Give \"mode\": \"drain_first\" to swap through a short 503 window, or a smaller kv_cache_memory",
                        serving, json{{"needed_bytes", needed}, {"free_bytes", free_beside}, {"memory_available_bytes", available},
                                      {"held_bytes", held}});
  }
  auto loaded = plan.value().load();
  if (!loaded.ok()) return error_answer(422, "load_failed", loaded.message() + "; '" + serving + "' goes on serving", serving);
  std::shared_ptr<ModelVersion> next = loaded.take();
  const json phases = phases_json(*next);
  const double load_seconds = next->load_seconds;
  const std::string previous = versions_.switch_to(std::move(next));
  serving_from_ = request;
  int64_t previous_in_flight = 0;
  for (const auto& v : versions_.live()) {
    if (v->label == previous) previous_in_flight = v->in_flight;
  }
  return {200, dump(json{{"version", request.label}, {"previous", previous}, {"mode", "both_loaded"}, {"load_seconds", load_seconds},
                         {"load_phases", phases}, {"swap_seconds", seconds_since(started)},
                         {"previous_requests_in_flight", previous_in_flight}})};
}

AdminAnswer AdminApi::swap_after_drain(const ModelLoadRequest& request, Clock::time_point started) {
  std::shared_ptr<ModelVersion> old = versions_.current();
  const std::string serving = label_of(old);
  auto plan = loader_.plan(request);
  if (!plan.ok()) return error_answer(422, "load_failed", plan.message() + "; '" + serving + "' goes on serving", serving);
  const int64_t needed = plan.value().weights_bytes + plan.value().kv_pool_bytes;
  const int64_t available = available_memory_bytes(), held = memory_held_by_versions();
  const int64_t held_by_old = old ? old->weight_file_bytes + old->kv_pool_bytes : 0;
  if (needed > available - held + held_by_old) {
    return error_answer(507, "insufficient_memory",
                        "version '" + request.label + "' needs " + format_memory_size(needed) + ", more than the " +
                            format_memory_size(available - held + held_by_old) + " there would be with '" + serving +
                            "' freed; '" + serving + "' goes on serving",
                        serving, json{{"needed_bytes", needed}, {"free_bytes", available - held + held_by_old}});
  }
  retry_after_seconds_ = 1 + int(std::ceil(old ? old->load_seconds : 1.0));
  set_state("draining", request.label);
  const Clock::time_point closed = Clock::now();
  versions_.switch_to(nullptr);
  std::weak_ptr<ModelVersion> watched = old;
  old.reset();
  // Wait for its last request; then it is freed (here, or by serve's housekeeping).
  const auto deadline = closed + drain_timeout_;
  while (!watched.expired() && Clock::now() < deadline) {
    versions_.release_unheld();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (auto still = watched.lock()) {
    const int64_t left = still->in_flight;
    versions_.switch_to(still);
    return error_answer(503, "drain_timeout",
                        "'" + serving + "' still had " + std::to_string(left) + " requests after " +
                            std::to_string(drain_timeout_.count() / 1000.0) + " s of draining; the swap is abandoned and '" + serving +
                            "' serves again",
                        serving);
  }
  set_state("loading", request.label);
  auto loaded = plan.value().load();
  if (loaded.ok()) {
    const double load_seconds = loaded.value()->load_seconds;
    const json phases = phases_json(*loaded.value());
    versions_.switch_to(loaded.take());
    serving_from_ = request;
    return {200, dump(json{{"version", request.label}, {"previous", serving}, {"mode", "drain_first"}, {"load_seconds", load_seconds},
                           {"load_phases", phases}, {"swap_seconds", seconds_since(started)},
                           {"unavailable_seconds", seconds_since(closed)}})};
  }
  const std::string why = loaded.message();
  if (serving.empty()) return error_answer(422, "load_failed", why + "; no model is serving", "");
  auto replan = loader_.plan(serving_from_);
  auto again = replan.ok() ? replan.value().load() : Result<std::shared_ptr<ModelVersion>>(replan.status());
  if (!again.ok()) {
    return error_answer(500, "load_failed",
                        why + "; and '" + serving + "' could not be loaded again (" + again.message() + "): no model is serving", "");
  }
  versions_.switch_to(again.take());
  return error_answer(422, "load_failed",
                      why + "; '" + serving + "' was loaded again and serves (requests were refused for " +
                          std::to_string(seconds_since(closed)) + " s)",
                      serving);
}

}  // namespace ds
