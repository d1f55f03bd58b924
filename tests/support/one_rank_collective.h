#pragma once
// The host collectives of a job of one rank, without MPI: what a device's
// collectives (parallel/device_ranks.h) are joined over where a test has one
// process and one device (NCCL's communicator of one rank).

#include <cstring>

#include "parallel/collective.h"

namespace ds {

class OneRankCollective : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(const float* in, int64_t n, float* out) override { std::memmove(out, in, size_t(n) * sizeof(float)); }
  void broadcast(void*, size_t, int) override {}
};

}  // namespace ds
