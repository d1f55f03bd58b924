#pragma once
// --tensor-parallel N: a command's N ranks (parallel/mpi_collective.h), each
// holding its part of the model. Started by hand (no MPI launcher around it),
// the command starts them itself: it becomes `mpirun -np N` of its own command
// line on this host. A process started by a launcher (mpirun with a hostfile,
// Slurm's srun, Kubernetes' MPI operator) joins its job's ranks instead.

#include <memory>

#include "base/status.h"
#include "cli/args.h"
#include "parallel/collective.h"

namespace ds {

// Null for N = 1 (one process). Otherwise, with no launcher around it, runs
// mpirun in this process's place (returning only if that fails); under one,
// this rank of the job, whose size must be N. argc/argv: the command's
// arguments after its name (as a subcommand is given them).
Result<std::unique_ptr<Collective>> join_tensor_parallel_ranks(const Args& args, const char* command, int argc, char** argv);

}  // namespace ds
