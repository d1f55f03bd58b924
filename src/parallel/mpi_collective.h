#pragma once
// Collectives over MPI (Debian's OpenMPI: shared memory between the ranks of
// one host, TCP or RDMA between hosts). One per process: MPI is initialised
// when it is made and finalised when it goes.

#include <memory>

#include "base/status.h"
#include "parallel/collective.h"

namespace ds {

// Whether this build has MPI (it is found at configure time).
bool have_mpi();
// Whether this process was started by an MPI launcher (mpirun, srun, an MPI
// operator's pods): it then joins its job's ranks rather than starting them.
bool launched_by_mpi();
// Joins the job's ranks (MPI_COMM_WORLD), for collectives called from one
// thread at a time; refused where this build has no MPI.
Result<std::unique_ptr<Collective>> join_mpi_ranks();

}  // namespace ds
