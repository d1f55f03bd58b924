#include "parallel/mpi_collective.h"

#include <cstdlib>
#include <vector>

#ifdef DSINFER_WITH_MPI
#include <mpi.h>
#endif

namespace ds {

bool launched_by_mpi() {
  // Open MPI's and MPICH's (PMI) launchers say so in the environment.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

#ifdef DSINFER_WITH_MPI

namespace {

class MpiCollective : public Collective {
 public:
  MpiCollective(int rank, int size) : rank_(rank), size_(size) {}
  ~MpiCollective() override { MPI_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, int64_t n) override {
    // Gathered, then summed here in rank order: MPI_Allreduce's order depends
    // on the algorithm the library picks for the message size.
    gathered_.resize(size_t(n) * size_t(size_));
    all_gather(data, n, gathered_.data());
    for (int64_t i = 0; i < n; ++i) {
      float sum = gathered_[size_t(i)];
      for (int r = 1; r < size_; ++r) sum += gathered_[size_t(r) * size_t(n) + size_t(i)];
      data[i] = sum;
    }
  }

  void all_gather(const float* in, int64_t n, float* out) override {
    check(MPI_Allgather(in, count(n), MPI_FLOAT, out, count(n), MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgather");
  }

  void broadcast(void* data, size_t bytes, int root) override {
    check(MPI_Bcast(data, count(int64_t(bytes)), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

 private:
  static int count(int64_t n) {
    DS_CHECK(n <= INT32_MAX, "a collective of more than 2^31 elements");
    return int(n);
  }
  // MPI's default handler aborts the job on an error, so a failed call that
  // returns is a broken invariant here too.
  static void check(int code, const char* call) { DS_CHECK(code == MPI_SUCCESS, call); }

  int rank_, size_;
  std::vector<float> gathered_;
};

}  // namespace

bool have_mpi() { return true; }

Result<std::unique_ptr<Collective>> join_mpi_ranks() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) return Status::error("MPI is already initialised in this process");
  // Serialized: the collectives are called from one thread at a time, which
  // need not be the one that joined (serve's engine thread runs the steps).
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return Status::error("MPI_Init_thread failed");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Status::error("this MPI library does not let a process's threads take turns calling it (MPI_THREAD_SERIALIZED)");
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<Collective>(new MpiCollective(rank, size));
}

#else

bool have_mpi() { return false; }

Result<std::unique_ptr<Collective>> join_mpi_ranks() {
  return Status::error("this build of dsinfer has no MPI (install libopenmpi-dev and build again)");
}

#endif

}  // namespace ds
