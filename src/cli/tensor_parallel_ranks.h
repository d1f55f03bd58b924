#pragma once
// --tensor-parallel N: a command's N ranks (parallel/mpi_collective.h), each
// holding its part of the model. Started by hand (no MPI launcher around it),
// the command starts them itself: it runs `mpirun -np N` of its own command
// line on this host and waits for it, turning SIGTERM and SIGINT into the
// SIGUSR1 mpirun hands to every rank. A process started by a launcher
// (mpirun with a hostfile, Slurm's srun, Kubernetes' MPI operator) joins its
// job's ranks instead; send its mpirun SIGUSR1 to stop it as gently. Ranks
// other than 0 ignore SIGTERM, SIGINT and SIGUSR1: they end when rank 0 does.

#include <memory>

#include "base/status.h"
#include "cli/args.h"
#include "parallel/collective.h"

namespace ds {

// Null for N = 1 (one process). Otherwise, with no launcher around it, runs
// mpirun and exits with its status (never returning); under one, this rank
// of the job, whose size must be N. argc/argv: the command's
// arguments after its name (as a subcommand is given them).
Result<std::unique_ptr<Collective>> join_tensor_parallel_ranks(const Args& args, const char* command, int argc, char** argv);

}  // namespace ds
