// Collectives between CUDA ranks over NCCL, built as libdsinfer_nccl.so where
// the toolkit has NCCL and loaded by parallel/device_ranks.cpp as the CUDA
// backend is: the binary links nothing of CUDA. Every call is issued in the
// backend's stream, so it runs after the ops before it and before those after
// it, with no synchronisation of the host. The ranks' communicator is made
// with the id rank 0 draws, broadcast over the host collective (MPI).

#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "base/status.h"
#include "device/cuda/cuda_common.cuh"
#include "parallel/collective.h"

#define DS_NCCL_CHECK(call)                                                                        \
  do {                                                                                             \
    const ncclResult_t ds_nccl_result = (call);                                                    \
    DS_CHECK(ds_nccl_result == ncclSuccess, std::string(#call) + ": " + ncclGetErrorString(ds_nccl_result)); \
  } while (0)

namespace ds {
namespace {

// out[i] = the sum of gathered[r * n + i] over r in rank order: the same
// additions on every rank, whatever NCCL's algorithm for the message size.
__global__ void sum_in_rank_order(const float* gathered, int64_t n, int ranks, float* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = gathered[i];
    for (int r = 1; r < ranks; ++r) sum += gathered[int64_t(r) * n + i];
    out[i] = sum;
  }
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream)
      : comm_(comm), rank_(rank), size_(size), device_(device), stream_(stream) {}
  ~NcclCollective() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaFree(gathered_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Gathered, then summed in rank order (ncclAllReduce's order depends on its
  // ring or tree). Each rank receives (size - 1) x n floats: for two ranks
  // what a ring all-reduce moves, for more ranks more.
  void all_reduce_sum(float* data, int64_t n) override {
    DS_CUDA_CHECK(cudaSetDevice(device_));
    const size_t bytes = size_t(n) * size_t(size_) * sizeof(float);
    if (bytes > gathered_bytes_) {
      DS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffer may still be read
      DS_CUDA_CHECK(cudaFree(gathered_));
      gathered_ = nullptr;
      DS_CUDA_CHECK(cudaMalloc(&gathered_, bytes));
      gathered_bytes_ = bytes;
    }
    all_gather(data, n, gathered_);
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
    sum_in_rank_order<<<unsigned(std::max<int64_t>(blocks, 1)), threads, 0, stream_>>>(gathered_, n, size_, data);
    DS_CUDA_CHECK(cudaGetLastError());
  }

  void all_gather(const float* in, int64_t n, float* out) override {
    DS_NCCL_CHECK(ncclAllGather(in, out, size_t(n), ncclFloat, comm_, stream_));
  }

  void broadcast(void* data, size_t bytes, int root) override {
    DS_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
  }

 private:
  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  float* gathered_ = nullptr;
  size_t gathered_bytes_ = 0;
};

// What rank 0 sends the others: its unique id, or that it could not draw one
// (so that no rank waits in ncclCommInitRank for a rank 0 that gave up).
struct Invitation {
  int drawn = 0;
  ncclUniqueId id{};
};

}  // namespace
}  // namespace ds

// The plugin's entry point: this rank's communicator among `host`'s ranks on
// GPU `device`, issuing in `stream` (a cudaStream_t); null with the reason in
// `error`. Every rank of `host` must call it.
extern "C" ds::Collective* dsinfer_nccl_collective(ds::Collective* host, int device, void* stream, char* error, size_t error_size) {
  ds::Invitation invitation;
  ncclResult_t drawn = ncclSuccess;
  if (host->rank() == 0) {
    drawn = ncclGetUniqueId(&invitation.id);
    invitation.drawn = drawn == ncclSuccess;
  }
  host->broadcast(&invitation, sizeof invitation, 0);
  if (!invitation.drawn) {
    std::snprintf(error, error_size, "NCCL: rank 0 could not draw the communicator's id%s%s", host->rank() == 0 ? ": " : "",
                  host->rank() == 0 ? ncclGetErrorString(drawn) : "");
    return nullptr;
  }
  cudaError_t selected = cudaSetDevice(device);
  if (selected != cudaSuccess) {
    std::snprintf(error, error_size, "NCCL: cudaSetDevice(%d): %s", device, cudaGetErrorString(selected));
    return nullptr;
  }
  ncclComm_t comm = nullptr;
  // A rank that fails here exits, and its launcher ends the job, so no rank waits for it for ever.
  const ncclResult_t made = ncclCommInitRank(&comm, host->size(), invitation.id, host->rank());
  if (made != ncclSuccess) {
    std::snprintf(error, error_size, "ncclCommInitRank (rank %d of %d, GPU %d): %s", host->rank(), host->size(), device,
                  ncclGetErrorString(made));
    return nullptr;
  }
  return new ds::NcclCollective(comm, host->rank(), host->size(), device, static_cast<cudaStream_t>(stream));
}
