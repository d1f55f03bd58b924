#include "cli/tensor_parallel_ranks.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device/device.h"
#include "parallel/mpi_collective.h"

namespace ds {
namespace {

// mpirun of this executable with the same command line, one process per rank
// on this host; each rank's threads are -t's, unbound (mpirun would otherwise
// pin each to one core). More ranks than cores run, slowly, and say so.
Status run_mpirun(int ranks, const char* command, int argc, char** argv) {
  std::vector<std::string> words = {"mpirun", "-np", std::to_string(ranks), "--bind-to", "none", "--oversubscribe"};
  if (ranks > usable_cpu_count()) {
    std::fprintf(stderr, "--tensor-parallel %d: more ranks than this process's %d cores; they will share them\n", ranks,
                 usable_cpu_count());
  }
  // Open MPI refuses root unless told; containers and CI run as root.
  if (geteuid() == 0) words.push_back("--allow-run-as-root");
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) return Status::error("--tensor-parallel: cannot find this executable (/proc/self/exe)");
  words.push_back(std::string(self, size_t(length)));
  words.push_back(command);
  for (int i = 0; i < argc; ++i) words.push_back(argv[i]);
  std::vector<char*> exec_argv;
  for (std::string& w : words) exec_argv.push_back(w.data());
  exec_argv.push_back(nullptr);
  execvp("mpirun", exec_argv.data());
  return Status::error(std::string("--tensor-parallel: cannot run mpirun (") + std::strerror(errno) + "): install openmpi-bin");
}

}  // namespace

Result<std::unique_ptr<Collective>> join_tensor_parallel_ranks(const Args& args, const char* command, int argc, char** argv) {
  auto ranks = args.get_int("--tensor-parallel", 1);
  if (!ranks.ok()) return ranks.status();
  if (ranks.value() < 1 || ranks.value() > 1024) return Status::error("--tensor-parallel must be 1..1024 ranks");
  if (ranks.value() == 1) return std::unique_ptr<Collective>();
  if (!have_mpi()) return join_mpi_ranks().status();
  if (!launched_by_mpi()) return run_mpirun(int(ranks.value()), command, argc, argv);
  auto joined = join_mpi_ranks();
  if (!joined.ok()) return joined.status();
  if (joined.value()->size() != ranks.value()) {
    return Status::error("--tensor-parallel " + std::to_string(ranks.value()) + ", but the launcher started " +
                         std::to_string(joined.value()->size()) + " ranks");
  }
  return joined;
}

}  // namespace ds
