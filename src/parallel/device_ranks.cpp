#include "parallel/device_ranks.h"

#include <cstring>
#include <string>

#include "device/backend_plugin.h"

namespace ds {
namespace {

// libdsinfer_nccl.so's entry point (parallel/nccl_collective.cu).
using NcclFactory = Collective* (*)(Collective* host, int device, void* stream, char* error, size_t error_size);

}  // namespace

Result<std::unique_ptr<Collective>> join_device_ranks(Backend& backend, Collective& host) {
  const Backend::NativeQueue queue = backend.native_queue();
  if (!queue.api) {
    if (backend.reads_host_memory()) return std::unique_ptr<Collective>();
    return Status::error("tensor parallel: the " + backend.name() + " backend has no collectives between ranks");
  }
  if (std::strcmp(queue.api, "cuda") != 0) {
    return Status::error("tensor parallel: no collectives for " + std::string(queue.api) + " devices (NCCL's are CUDA's)");
  }
  auto entry = load_plugin_symbol("nccl", "dsinfer_nccl_collective", "tensor parallel on " + backend.name());
  if (!entry.ok()) return entry.status();
  char error[512] = "";
  Collective* joined = reinterpret_cast<NcclFactory>(entry.value())(&host, queue.device, queue.stream, error, sizeof error);
  if (!joined) return Status::error("tensor parallel on " + backend.name() + ": " + error);
  return std::unique_ptr<Collective>(joined);
}

}  // namespace ds
