#include "cli/tensor_parallel_ranks.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/device.h"
#include "parallel/mpi_collective.h"

namespace ds {
namespace {

pid_t launcher = 0;  // the mpirun this process supervises

// A stop signal (SIGTERM, SIGINT) becomes SIGUSR1 to mpirun, which hands it to
// every rank (SIGTERM it would turn into killing the job): rank 0 acts on it
// (serve drains), the others wait for rank 0.
void forward_stop(int) { kill(launcher, SIGUSR1); }

// mpirun of this executable with the same command line, one process per rank
// on this host, each rank's threads -t's and unbound by mpirun (which would
// pin each to one core): a rank pins itself to its --device, if given. This
// process waits for mpirun and ends with its status.
// More ranks than cores run, slowly, and say so.
[[noreturn]] void supervise_mpirun(int ranks, const char* command, int argc, char** argv) {
  std::vector<std::string> words = {"mpirun", "-np", std::to_string(ranks), "--bind-to", "none", "--oversubscribe"};
  if (ranks > usable_cpu_count()) {
    std::fprintf(stderr, "--tensor-parallel %d: more ranks than this process's %d cores; they will share them\n", ranks,
                 usable_cpu_count());
  }
  // Open MPI refuses root unless told; containers and CI run as root.
  if (geteuid() == 0) words.push_back("--allow-run-as-root");
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    std::fprintf(stderr, "--tensor-parallel: cannot find this executable (/proc/self/exe)\n");
    std::exit(1);
  }
  words.push_back(std::string(self, size_t(length)));
  words.push_back(command);
  for (int i = 0; i < argc; ++i) words.push_back(argv[i]);
  std::vector<char*> exec_argv;
  for (std::string& w : words) exec_argv.push_back(w.data());
  exec_argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t supervisor = getpid();
  launcher = fork();
  if (launcher < 0) {
    std::fprintf(stderr, "--tensor-parallel: fork: %s\n", std::strerror(errno));
    std::exit(1);
  }
  if (launcher == 0) {
    setpgid(0, 0);  // a terminal's Ctrl-C reaches this process alone, which forwards it as above
    // This process killed (SIGKILL: no handler forwards it) ends the job too, not orphaning its ranks.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != supervisor) _exit(1);  // it died before the line above
    execvp("mpirun", exec_argv.data());
    std::fprintf(stderr, "--tensor-parallel: cannot run mpirun (%s): install openmpi-bin\n", std::strerror(errno));
    _exit(127);
  }
  struct sigaction action = {};
  action.sa_handler = forward_stop;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  int status = 0;
  while (waitpid(launcher, &status, 0) < 0 && errno == EINTR) {
  }
  std::exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

}  // namespace

Result<std::unique_ptr<Collective>> join_tensor_parallel_ranks(const Args& args, const char* command, int argc, char** argv) {
  auto ranks = args.get_int("--tensor-parallel");
  if (!ranks.ok()) return ranks.status();
  if (ranks.value() < 1 || ranks.value() > 1024) return Status::error("--tensor-parallel must be 1..1024 ranks");
  if (ranks.value() == 1) return std::unique_ptr<Collective>();
  if (!have_mpi()) return join_mpi_ranks().status();
  if (args.has("--device")) {  // checked once here, before the ranks start, each of which claims its own
    auto devices = parse_devices(args.get("--device"));
    if (!devices.ok()) return devices.status();
    if (int64_t(devices.value().size()) != ranks.value()) {
      return Status::error("--tensor-parallel " + std::to_string(ranks.value()) + " needs one device per rank; --device names " +
                           std::to_string(devices.value().size()));
    }
  }
  if (!launched_by_mpi()) supervise_mpirun(int(ranks.value()), command, argc, argv);
  auto joined = join_mpi_ranks();
  if (!joined.ok()) return joined.status();
  if (joined.value()->size() != ranks.value()) {
    return Status::error("--tensor-parallel " + std::to_string(ranks.value()) + ", but the launcher started " +
                         std::to_string(joined.value()->size()) + " ranks");
  }
  // The launcher hands a stop signal to every rank; rank 0 acts on it (serve
  // drains), and the others end when rank 0 tells them, not before it.
  if (joined.value()->rank() != 0) {
    for (int signal : {SIGTERM, SIGINT, SIGUSR1}) std::signal(signal, SIG_IGN);
  }
  return joined;
}

}  // namespace ds
