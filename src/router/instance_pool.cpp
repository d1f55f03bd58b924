#include "router/instance_pool.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/log.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

// The prefix index's entry for a shared disk tier (instance ids hold no ':').
std::string tier_key(const std::string& kv_disk_dir) { return "kv-disk-dir:" + kv_disk_dir; }

// A loopback port free now (the child binds it next).
Result<uint16_t> free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!ok) return Status::error(std::string("no free loopback port: ") + std::strerror(errno));
  return uint16_t(ntohs(address.sin_port));
}

std::string exit_description(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

const char* instance_state_name(Instance::State state) {
  switch (state) {
    case Instance::State::starting: return "starting";
    case Instance::State::healthy: return "healthy";
    case Instance::State::ejected: return "ejected";
  }
  return "?";
}

Endpoint Instance::endpoint() const {
  std::lock_guard lock(mutex_);
  return endpoint_;
}

Instance::State Instance::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

InstancePool::InstancePool(std::vector<InstanceSpec> specs, Options options) : options_(std::move(options)) {
  for (InstanceSpec& spec : specs) instances_.push_back(std::make_shared<Instance>(std::move(spec)));
}

InstancePool::~InstancePool() {
  stopping_ = true;
  if (prober_.joinable()) prober_.join();
  std::vector<pid_t> children;
  for (auto& instance : instances_) {
    std::lock_guard lock(instance->mutex_);
    if (instance->pid_ > 0) {
      kill(instance->pid_, SIGTERM);  // each drains its requests
      children.push_back(instance->pid_);
    }
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (pid_t pid : children) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

Status InstancePool::spawn(Instance& instance) {
  const InstanceSpec& spec = instance.spec();
  uint16_t port = instance.endpoint_.port;
  if (port == 0) {
    auto free = free_loopback_port();
    if (!free.ok()) return free.status();
    port = free.value();
  }
  std::vector<std::string> args = {options_.dsinfer, "serve", "-m", spec.model, "--host", "127.0.0.1", "--port", std::to_string(port),
                                   "--model-version", spec.version};
  if (!spec.device.empty()) args.insert(args.end(), {"--device", spec.device});
  if (!options_.api_keys_file.empty()) args.insert(args.end(), {"--api-keys", options_.api_keys_file});
  args.insert(args.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // A child outlives no router, however the router ends (SIGKILL included):
    // it would hold its port and its device with nobody to route to it. (The
    // signal follows the forking thread, main or prober: both live as long as the router.)
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the router died before the line above
    execv(argv[0], argv.data());
    std::fprintf(stderr, "dsinfer router: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  instance.pid_ = pid;
  instance.endpoint_ = {"127.0.0.1", port};
  instance.state_ = Instance::State::starting;
  // A new process is judged on its own: its predecessor's latency samples,
  // failed requests and metrics would eject or route it for what it never did.
  instance.latency_ms_.clear();
  instance.slow_ = false;
  instance.failed_.clear();
  instance.failing_ = false;
  instance.metrics_.reset();
  instance.others_work_ = 0;
  DS_LOG_INFO("router: instance '%s' started as PID %d on 127.0.0.1:%u (%s, version %s)", spec.id.c_str(), int(pid), unsigned(port),
              spec.model.c_str(), spec.version.c_str());
  return Status();
}

Status InstancePool::start() {
  for (auto& instance : instances_) {
    std::lock_guard lock(instance->mutex_);
    if (instance->spec().child()) {
      DS_RETURN_IF_ERROR(spawn(*instance));
    } else {
      instance->endpoint_ = parse_endpoint_url(instance->spec().url).value();
    }
  }
  prober_ = std::thread([this] { probe_loop(); });
  return Status();
}

void InstancePool::probe_loop() {
  for (int64_t round = 0; !stopping_; ++round) {
    const auto started = Clock::now();
    const bool with_latency = round % options_.latency_probe_every == 0;
    for (auto& instance : instances_) {
      if (stopping_) return;
      probe(*instance, with_latency);
    }
    if (with_latency) eject_latency_outliers();
    std::this_thread::sleep_until(started + options_.probe_interval);
  }
}

namespace {
constexpr size_t k_latency_samples = 3;
constexpr std::chrono::milliseconds k_latency_probe_timeout{5000};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
}  // namespace

std::optional<double> InstancePool::latency_probe(const Endpoint& endpoint) const {
  const auto started = Clock::now();
  const HttpHeaders key = options_.probe_key.empty() ? HttpHeaders{} : HttpHeaders{{"Authorization", "Bearer " + options_.probe_key}};
  auto answer =
      UpstreamClient::request(endpoint, "POST", "/v1/completions", "{\"prompt\": [1], \"max_tokens\": 1}", k_latency_probe_timeout, key);
  if (!answer.ok() || answer.value().first != 200) return std::nullopt;
  return std::chrono::duration<double, std::milli>(Clock::now() - started).count();
}

double InstancePool::latency_bound(const Instance& instance) const {
  std::vector<double> others;
  for (const auto& other : instances_) {
    if (other.get() == &instance) continue;
    std::lock_guard lock(other->mutex_);
    if (other->state_ == Instance::State::healthy && !other->latency_ms_.empty()) others.push_back(median(other->latency_ms_));
  }
  if (others.empty()) return 0.0;
  const double typical = median(others);
  return std::max(3.0 * typical, typical + 250.0);
}

void InstancePool::eject_latency_outliers() {
  for (auto& instance : instances_) {
    const double bound = latency_bound(*instance);
    std::lock_guard lock(instance->mutex_);
    if (bound <= 0 || instance->state_ != Instance::State::healthy || instance->latency_ms_.size() < k_latency_samples) continue;
    const double mine = median(instance->latency_ms_);
    if (mine <= bound) continue;
    char why[160];
    std::snprintf(why, sizeof why, "latency outlier: a one-token completion takes %.0f ms, over the bound of %.0f ms from the others", mine, bound);
    eject_locked(*instance, why);
    instance->slow_ = true;
    instance->latency_ms_.clear();
  }
}

void InstancePool::probe(Instance& instance, bool with_latency) {
  {
    std::lock_guard lock(instance.mutex_);
    if (instance.pid_ > 0) {
      int status = 0;
      if (waitpid(instance.pid_, &status, WNOHANG) == instance.pid_) {
        const std::string why = "the process " + exit_description(status);
        DS_LOG_WARN("router: instance '%s' (PID %d) %s: starting it again", instance.spec().id.c_str(), int(instance.pid_), why.c_str());
        instance.pid_ = -1;
        if (instance.state_ == Instance::State::healthy) ++instance.ejections_;
        instance.last_error_ = why;
        ++instance.restarts_;
        if (Status s = spawn(instance); !s.ok()) {
          instance.state_ = Instance::State::ejected;
          instance.last_error_ = why + "; restart failed: " + s.message();
        }
        return;
      }
    }
    if (instance.state_ == Instance::State::ejected && Clock::now() < instance.next_probe_) return;
  }
  const Endpoint endpoint = instance.endpoint();
  auto health = UpstreamClient::request(endpoint, "GET", "/health", "", options_.probe_timeout);
  auto ready =
      health.ok() && health.value().first == 200 ? UpstreamClient::request(endpoint, "GET", "/ready", "", options_.probe_timeout) : health;
  const bool ok = ready.ok() && ready.value().first == 200;
  bool slow = false, failing = false;
  {
    std::lock_guard lock(instance.mutex_);
    slow = instance.slow_ && instance.state_ == Instance::State::ejected;
    failing = instance.failing_ && instance.state_ == Instance::State::ejected;
  }
  if (ok && (with_latency || slow || failing)) {
    const auto answered = latency_probe(endpoint);
    const double ms = answered.value_or(double(k_latency_probe_timeout.count()));
    const double bound = slow ? latency_bound(instance) : 0.0;
    std::lock_guard lock(instance.mutex_);
    if (failing && !answered) return eject_locked(instance, "still failing: a one-token completion failed");
    if (slow && bound > 0 && ms > bound) {  // ready, but still too slow to readmit
      char why[160];
      std::snprintf(why, sizeof why, "still a latency outlier: %.0f ms, over the bound of %.0f ms", ms, bound);
      return eject_locked(instance, why);
    }
    instance.latency_ms_.push_back(ms);
    if (instance.latency_ms_.size() > k_latency_samples) instance.latency_ms_.erase(instance.latency_ms_.begin());
  }
  if (ok) {
    scrape_metrics(instance, endpoint);
    std::lock_guard lock(instance.mutex_);
    instance.slow_ = false;
    instance.failing_ = false;
    if (instance.state_ != Instance::State::healthy) {
      DS_LOG_INFO("router: instance '%s' is %s", instance.spec().id.c_str(),
                  instance.state_ == Instance::State::starting ? "ready" : "ready again: readmitted");
    }
    instance.state_ = Instance::State::healthy;
    instance.backoff_ = std::chrono::milliseconds(0);
    return;
  }
  const std::string why = !ready.ok() ? ready.message() : "/health or /ready answered " + std::to_string(ready.value().first) + " " +
                                                           ready.value().second.substr(0, 200);
  std::lock_guard lock(instance.mutex_);
  if (instance.state_ == Instance::State::starting) return;  // not up yet
  eject_locked(instance, why);
}

void InstancePool::scrape_metrics(Instance& instance, const Endpoint& endpoint) {
  const HttpHeaders key = options_.probe_key.empty() ? HttpHeaders{} : HttpHeaders{{"Authorization", "Bearer " + options_.probe_key}};
  const int64_t sent = instance.outstanding;  // of the instance's running and waiting, the router's own
  auto answer = UpstreamClient::request(endpoint, "GET", "/metrics", "", options_.probe_timeout, key);
  std::optional<InstanceMetrics> metrics;
  if (answer.ok() && answer.value().first == 200) metrics = parse_instance_metrics(answer.value().second);
  if (metrics && options_.history) options_.history->add_scrape(instance.spec().id, *metrics);
  std::lock_guard lock(instance.mutex_);
  instance.metrics_ = metrics;
  instance.others_work_ = metrics ? std::max(0.0, metrics->running + metrics->waiting - double(sent)) : 0.0;
}

double InstancePool::kv_usage(const Instance& instance) {
  std::lock_guard lock(instance.mutex_);
  return instance.metrics_ ? instance.metrics_->kv_usage : 0.0;
}

double InstancePool::load(const Instance& instance) {
  std::lock_guard lock(instance.mutex_);
  return double(instance.outstanding.load()) + instance.others_work_;
}

void InstancePool::eject_locked(Instance& instance, const std::string& why) {
  if (instance.state_ == Instance::State::healthy) {
    DS_LOG_WARN("router: instance '%s' ejected: %s", instance.spec().id.c_str(), why.c_str());
    ++instance.ejections_;
  }
  // Each failed half-open probe doubles the wait before the next.
  instance.state_ = Instance::State::ejected;
  instance.backoff_ = std::min(options_.max_backoff, std::max(options_.probe_interval, instance.backoff_ * 2));
  instance.next_probe_ = Clock::now() + instance.backoff_;
  instance.last_error_ = why;
}

void InstancePool::report_outcome(Instance& instance, int status) {
  constexpr size_t k_window = 10, k_trip = 5;
  const bool failed = status >= 500 && status != 503;  // 503: busy or draining, and already retried elsewhere
  std::lock_guard lock(instance.mutex_);
  instance.failed_.push_back(failed);
  if (instance.failed_.size() > k_window) instance.failed_.pop_front();
  const auto failures = size_t(std::count(instance.failed_.begin(), instance.failed_.end(), true));
  if (instance.state_ != Instance::State::healthy || failures < k_trip) return;
  eject_locked(instance, "passive: " + std::to_string(failures) + " of its last " + std::to_string(instance.failed_.size()) +
                             " requests failed (last status " + std::to_string(status) + ")");
  instance.failing_ = true;
  instance.failed_.clear();
}

void InstancePool::report_unreachable(Instance& instance, const std::string& error) {
  std::lock_guard lock(instance.mutex_);
  if (instance.state_ == Instance::State::healthy) eject_locked(instance, "a request could not reach it: " + error);
}

std::shared_ptr<Instance> InstancePool::pick(const std::string& version, const std::set<std::string>& tried,
                                             const std::vector<uint64_t>& prompt_blocks) {
  std::vector<std::shared_ptr<Instance>> open;
  for (const auto& instance : instances_) {
    if ((version.empty() || instance->spec().version == version) && !tried.count(instance->spec().id) && !instance->draining &&
        instance->state() == Instance::State::healthy) {
      open.push_back(instance);
    }
  }
  if (open.empty()) return nullptr;
  std::shared_ptr<Instance> chosen = open[0];
  if (options_.routing == "random") {
    std::lock_guard lock(random_mutex_);
    chosen = open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(random_)];
  } else {
    std::vector<double> loads, kv;
    for (const auto& instance : open) {
      loads.push_back(load(*instance));
      kv.push_back(kv_usage(*instance));
    }
    // Of equal request loads, the one holding fewer KV pages: fewer tokens in flight.
    size_t least = 0;
    for (size_t i = 1; i < open.size(); ++i) {
      if (loads[i] < loads[least] || (loads[i] == loads[least] && kv[i] < kv[least])) least = i;
    }
    chosen = open[least];
    if (options_.routing == "prefix_affinity" && !prompt_blocks.empty()) {
      // Where the longest prefix probably is: an instance's pool, or a disk
      // tier several instances share (any of them reads it back, so the least
      // busy of them; a read costs about twice a pool hit, far less than
      // computing it). Not one much busier than the least busy (recomputing
      // costs less than queueing behind twice the work) nor one whose KV pages
      // are nearly all held (its cached prefix is about to be evicted).
      const auto usable = [&](size_t i) { return loads[i] <= 2 * loads[least] + 4 && kv[i] < 0.9; };
      size_t in_pool = open.size(), pool_blocks = 0, on_disk = open.size(), disk_blocks = 0;
      for (size_t i = 0; i < open.size(); ++i) {
        const size_t n = prefixes_.match(open[i]->spec().id, prompt_blocks);
        if (n > pool_blocks) {
          pool_blocks = n;
          in_pool = i;
        }
        const std::string& dir = open[i]->spec().kv_disk_dir;
        const size_t d = dir.empty() ? 0 : prefixes_.match(tier_key(dir), prompt_blocks);
        if (d > 0 && (d > disk_blocks || (d == disk_blocks && loads[i] < loads[on_disk]))) {
          disk_blocks = d;
          on_disk = i;
        }
      }
      const bool disk_first = disk_blocks > pool_blocks;
      for (const size_t i : {disk_first ? on_disk : in_pool, disk_first ? in_pool : on_disk}) {
        if (i < open.size() && usable(i)) {
          chosen = open[i];
          break;
        }
      }
    }
  }
  prefixes_.insert(chosen->spec().id, prompt_blocks);
  if (!chosen->spec().kv_disk_dir.empty()) prefixes_.insert(tier_key(chosen->spec().kv_disk_dir), prompt_blocks);
  return chosen;
}

bool InstancePool::any_healthy() const {
  for (const auto& instance : instances_) {
    if (instance->state() == Instance::State::healthy && !instance->draining) return true;
  }
  return false;
}

bool InstancePool::set_draining(const std::string& id, bool draining) {
  for (const auto& instance : instances_) {
    if (instance->spec().id != id) continue;
    instance->draining = draining;
    DS_LOG_INFO("router: instance '%s' %s", id.c_str(), draining ? "drains: no new requests" : "resumes taking requests");
    return true;
  }
  return false;
}

std::string InstancePool::status_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& instance : instances_) {
    std::lock_guard lock(instance->mutex_);
    list.push_back({{"id", instance->spec().id}, {"version", instance->spec().version}, {"state", instance_state_name(instance->state_)},
                    {"url", "http://" + instance->endpoint_.text()}, {"pid", instance->pid_ > 0 ? nlohmann::json(instance->pid_) : nlohmann::json(nullptr)},
                    {"child", instance->spec().child()}, {"draining", instance->draining.load()}, {"outstanding", instance->outstanding.load()}, {"restarts", instance->restarts_},
                    {"ejections", instance->ejections_}, {"last_error", instance->last_error_},
                    {"latency_ms", instance->latency_ms_.empty() ? nlohmann::json(nullptr) : nlohmann::json(median(instance->latency_ms_))}});
    nlohmann::json& metrics = list.back()["metrics"];
    if (const auto& m = instance->metrics_) {
      metrics = {{"running", m->running}, {"waiting", m->waiting}, {"kv_usage", m->kv_usage}, {"kv_pages_cached", m->kv_pages_cached},
                 {"kv_pages_total", m->kv_pages_total}, {"requests_finished", m->requests_finished}, {"generation_tokens", m->generation_tokens}};
    }
  }
  return nlohmann::json{{"instances", list}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ds
