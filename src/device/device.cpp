#include "device/device.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "base/log.h"

namespace ds {
namespace {

constexpr int k_mpol_bind = 2;  // <numaif.h>'s MPOL_BIND, without linking libnuma for one call

// "0-3,6" -> {0, 1, 2, 3, 6}.
Result<std::vector<int>> parse_cpu_list(const std::string& list, const std::string& what) {
  std::set<int> cores;
  size_t at = 0;
  while (at < list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    char* end = nullptr;
    const long first = std::strtol(item.c_str(), &end, 10);
    long last = first;
    if (end == item.c_str()) return Status::error(what + ": '" + item + "' is not a core number or range");
    if (*end == '-') {
      const char* from = end + 1;
      last = std::strtol(from, &end, 10);
      if (end == from) return Status::error(what + ": '" + item + "' is not a core range");
    }
    if (*end != '\0' || first < 0 || last < first || last >= CPU_SETSIZE) {
      return Status::error(what + ": '" + item + "' is not a core number or range (0.." + std::to_string(CPU_SETSIZE - 1) + ")");
    }
    for (long c = first; c <= last; ++c) cores.insert(int(c));
    at = comma + 1;
  }
  if (cores.empty()) return Status::error(what + ": no cores");
  return std::vector<int>(cores.begin(), cores.end());
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool make_dir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) == 0) {
    chmod(path.c_str(), mode);  // past the umask
    return true;
  }
  struct stat st {};
  return errno == EEXIST && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && access(path.c_str(), W_OK) == 0;
}

}  // namespace

Result<DeviceSpec> parse_device(const std::string& text) {
  DeviceSpec spec;
  spec.text = text;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "cuda") {
    char* end = nullptr;
    const char* number = colon == std::string::npos ? "" : text.c_str() + colon + 1;
    const long gpu = std::strtol(number, &end, 10);
    if (end == number || *end != '\0' || gpu < 0 || gpu > 1024) return Status::error("--device " + text + ": expected cuda:N");
    spec.gpu = int(gpu);
    return spec;
  }
  if (kind == "npu" || kind == "gpu") {
    return Status::error("--device " + text + ": dsinfer has no " + kind + " backend yet; devices are cpu:CORES, cpu:numaN and cuda:N");
  }
  if (kind != "cpu" || colon == std::string::npos || colon + 1 == text.size()) {
    return Status::error("--device must be cpu:CORES (e.g. cpu:0-3,6) or cpu:numaN, got '" + text + "'");
  }
  const std::string what = text.substr(colon + 1);
  std::string list = what;
  if (what.rfind("numa", 0) == 0) {
    char* end = nullptr;
    const long node = std::strtol(what.c_str() + 4, &end, 10);
    if (end == what.c_str() + 4 || *end != '\0' || node < 0) return Status::error("--device " + text + ": expected cpu:numaN");
    list = read_line("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
    if (list.empty()) return Status::error("--device " + text + ": this machine has no NUMA node " + std::to_string(node));
    spec.numa_node = int(node);
  }
  auto cores = parse_cpu_list(list, "--device " + text);
  if (!cores.ok()) return cores.status();
  spec.cores = cores.take();
  const int n_cpus = int(sysconf(_SC_NPROCESSORS_CONF));
  if (spec.cores.back() >= n_cpus) {
    return Status::error("--device " + text + ": core " + std::to_string(spec.cores.back()) + " does not exist (this machine has " +
                         std::to_string(n_cpus) + ")");
  }
  return spec;
}

Result<std::vector<DeviceSpec>> parse_devices(const std::string& text) {
  std::vector<std::string> texts;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    if (item.empty()) return Status::error("--device " + text + ": an empty item in the list");
    if (item.find(':') != std::string::npos || texts.empty()) {
      texts.push_back(item);
    } else {
      texts.back() += "," + item;  // more of the previous device's cores
    }
    at = comma + 1;
  }
  std::vector<DeviceSpec> devices;
  for (const std::string& one : texts) {
    auto spec = parse_device(one);
    if (!spec.ok()) return spec.status();
    devices.push_back(spec.take());
  }
  return devices;
}

std::string default_run_dir() {
  if (const char* dir = std::getenv("DSINFER_RUN_DIR"); dir && *dir) return dir;
  if (make_dir("/run/dsinfer", 0755)) return "/run/dsinfer";
  return "/tmp/dsinfer";
}

Result<DeviceClaim> DeviceClaim::claim(const DeviceSpec& spec, const std::string& run_dir) {
  if (!make_dir(run_dir, 01777)) return Status::error("--run-dir " + run_dir + ": cannot create or write it: " + std::strerror(errno));
  DeviceClaim claim;
  std::vector<std::pair<std::string, std::string>> locks;  // file, what it locks
  for (int core : spec.cores) locks.emplace_back("cpu-" + std::to_string(core), "core " + std::to_string(core));
  if (spec.gpu >= 0) locks.emplace_back("cuda-" + std::to_string(spec.gpu), "GPU " + std::to_string(spec.gpu));
  for (const auto& [file, what] : locks) {
    const std::string path = run_dir + "/" + file + ".lock";
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);  // another user's file: flock works on it read-only
    if (fd < 0) return Status::error("--device " + spec.text + ": cannot open " + path + ": " + std::strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const std::string holder = read_line(path);
      close(fd);
      return Status::error("--device " + spec.text + ": " + what + " is held by dsinfer PID " +
                           (holder.empty() ? std::string("?") : holder) + " (" + path + "); one instance per device");
    }
    claim.lock_fds_.push_back(fd);
    // The PID is a note for a refused instance's message; the lock holds without it.
    const std::string pid = std::to_string(getpid()) + "\n";
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
      DS_LOG_WARN("cannot write this PID into %s", path.c_str());
    }
  }
  if (spec.cores.empty()) return claim;  // a GPU: its host threads run wherever the scheduler puts them
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int core : spec.cores) CPU_SET(core, &set);
  // Every thread of the process, not only this one: a library may have
  // started its own before the claim (MPI's progress threads under --tensor-parallel).
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    const pid_t thread = pid_t(std::atol(task.path().filename().c_str()));
    if (sched_setaffinity(thread, sizeof set, &set) != 0 && errno != ESRCH) {  // ESRCH: it ended meanwhile
      return Status::error("--device " + spec.text + ": cannot pin to its cores: " + std::strerror(errno));
    }
  }
  if (spec.numa_node >= 0) {
    unsigned long mask[16] = {};
    if (spec.numa_node >= int(sizeof mask * 8)) return Status::error("--device " + spec.text + ": NUMA node number too large");
    mask[spec.numa_node / 64] |= 1ul << (spec.numa_node % 64);
    if (syscall(SYS_set_mempolicy, k_mpol_bind, mask, sizeof mask * 8) != 0) {
      return Status::error("--device " + spec.text + ": cannot bind memory to node " + std::to_string(spec.numa_node) + ": " +
                           std::strerror(errno));
    }
  }
  return claim;
}

DeviceClaim::~DeviceClaim() {
  for (int fd : lock_fds_) close(fd);
}

int usable_cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace ds
