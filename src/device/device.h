#pragma once
// One owner per device. `--device cpu:0-3,6` (cores) or `cpu:numa0` (a NUMA
// node's cores and memory) names what an instance runs on; claiming it pins
// the process to those cores (every thread started afterwards inherits it),
// binds memory to the node when a node was named, and takes an exclusive
// lock per core: a file `cpu-N.lock` under the run directory, held with
// flock and naming the holder's PID. `cuda:N` names GPU N: the model runs on
// the CUDA backend (device/backend.h) and the lock is `cuda-N.lock`. The
// kernel drops a flock when its holder exits, however it exits (SIGKILL
// included), so a dead instance never keeps a device. NPUs (`npu:0`) are
// refused by name until their backend exists.

#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

struct DeviceSpec {
  std::string text;        // as given
  std::vector<int> cores;  // ascending, distinct; empty for a GPU
  int numa_node = -1;      // cpu:numaN, else -1
  int gpu = -1;            // cuda:N, else -1
  // The backend the model runs on: "cpu" or "cuda:N" (device/backend.h's create_backend).
  std::string backend() const { return gpu >= 0 ? "cuda:" + std::to_string(gpu) : "cpu"; }
};

// Parses "cpu:LIST" (LIST: "0-3,6"), "cpu:numaN" (its cores from sysfs) or
// "cuda:N". Cores must exist on this machine; a GPU is checked when its
// backend starts.
Result<DeviceSpec> parse_device(const std::string& text);
// One device per rank of --tensor-parallel, in rank order, comma-separated as
// llama.cpp's --device lists its devices: "cpu:numa0,cpu:numa1",
// "cpu:0-3,6,cpu:4-5" (a new device where an item names its kind), or
// "cuda:0,cuda:1". Ranks on different hosts may name the same cores; two
// ranks of one host that do are stopped by the cores' locks (DeviceClaim).
Result<std::vector<DeviceSpec>> parse_devices(const std::string& text);

// The run directory: $DSINFER_RUN_DIR, else /run/dsinfer where it can be
// made, else /tmp/dsinfer (sticky and world-writable, as /tmp, so every
// user's instances see each other's locks).
std::string default_run_dir();

class DeviceClaim {
 public:
  // Locks every core of `spec` (failing, naming the holder's PID, if another
  // process holds one), then pins this process and binds its memory.
  static Result<DeviceClaim> claim(const DeviceSpec& spec, const std::string& run_dir);
  DeviceClaim(DeviceClaim&& other) noexcept : lock_fds_(std::move(other.lock_fds_)) { other.lock_fds_.clear(); }
  DeviceClaim& operator=(DeviceClaim&&) = delete;
  DeviceClaim(const DeviceClaim&) = delete;
  ~DeviceClaim();  // releases the locks

 private:
  DeviceClaim() = default;
  std::vector<int> lock_fds_;
};

// The CPUs this process may run on (its affinity mask): the default thread count.
int usable_cpu_count();

}  // namespace ds
