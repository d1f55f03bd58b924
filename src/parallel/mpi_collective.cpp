#include "parallel/mpi_collective.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "base/file_text.h"

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

// A rank's process as the others may look it up: its PID means something to
// a rank of the same kernel (boot id) and PID namespace only.
struct RankProcess {
  int32_t pid = 0;
  char boot_id[40] = {};
  char pid_namespace[40] = {};
};

RankProcess this_process() {
  RankProcess p;
  p.pid = int32_t(getpid());
  const auto boot = read_file_text("/proc/sys/kernel/random/boot_id");
  if (boot) std::strncpy(p.boot_id, boot->c_str(), sizeof p.boot_id - 1);
  const ssize_t n = readlink("/proc/self/ns/pid", p.pid_namespace, sizeof p.pid_namespace - 1);
  if (n < 0) p.pid_namespace[0] = '\0';
  return p;
}

// "died", "is stopped", or empty while the process runs ('R', 'S', 'D'):
// the state letter of /proc/PID/stat, after the command name's ')'.
std::string process_trouble(int32_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return "died";
  const size_t close = line.rfind(')');
  const char state = close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
  if (state == 'Z' || state == 'X') return "died";
  if (state == 'T' || state == 't') return "is stopped";
  return "";
}

class MpiCollective : public Collective {
 public:
  MpiCollective(int rank, int size) : rank_(rank), size_(size) {
    const RankProcess mine = this_process();
    processes_.resize(size_t(size_));
    check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, processes_.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
  }
  ~MpiCollective() override {
    if (rank_ != 0 && !ended_) MPI_Abort(MPI_COMM_WORLD, 1);  // Collective::job_ended: leaving alone ends the job
    MPI_Finalize();
  }

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

  // The ranks of other hosts are not looked at: their launcher's daemon ends
  // the job when one dies, and one that stalls stalls this rank's steps,
  // which the engine's watchdog reports.
  void job_ended() override { ended_ = true; }

  std::optional<std::string> fault() const override {
    const RankProcess& mine = processes_[size_t(rank_)];
    for (int r = 0; r < size_; ++r) {
      const RankProcess& other = processes_[size_t(r)];
      if (r == rank_ || std::strcmp(other.boot_id, mine.boot_id) != 0 || std::strcmp(other.pid_namespace, mine.pid_namespace) != 0) continue;
      const std::string trouble = process_trouble(other.pid);
      if (!trouble.empty()) return "rank " + std::to_string(r) + " (PID " + std::to_string(other.pid) + ") " + trouble;
    }
    return std::nullopt;
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
  bool ended_ = false;  // rank 0 ended the job
  std::vector<RankProcess> processes_;  // every rank's, in rank order
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
