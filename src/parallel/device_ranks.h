#pragma once
// The collectives a split model's forward calls on its backend's memory (the
// all-reduces after attention and the FFN, the logits' all-gather), among the
// ranks that `host` (MPI, parallel/mpi_collective.h) joins, which carries the
// steps. On the CPU they are `host`'s own; on CUDA they run over NCCL
// (libdsinfer_nccl.so, built where the toolkit has NCCL, loaded as the CUDA
// backend is), in the backend's stream, its ops' order.

#include <memory>

#include "base/status.h"
#include "device/backend.h"
#include "parallel/collective.h"

namespace ds {

// Null where the backend's memory is the host's (`host` serves); the device's
// collectives otherwise, or an error naming what this build lacks.
Result<std::unique_ptr<Collective>> join_device_ranks(Backend& backend, Collective& host);

}  // namespace ds
