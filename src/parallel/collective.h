#pragma once
// The ranks of a model split across processes (tensor parallel), and what
// they say to each other: collectives over an existing engine (MPI for CPU
// ranks: mpi_collective.h), never a transport of our own. Every reduction
// sums the ranks' contributions in rank order, the same on every rank, so a
// result never depends on timing or on which rank computes it.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace ds {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, n) = the sum over ranks, in rank order, of each rank's data.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // out[r * n, (r + 1) * n) = rank r's in[0, n), on every rank.
  virtual void all_gather(const float* in, int64_t n, float* out) = 0;
  // data[0, bytes) = root's, on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Why the ranks cannot go on, found without a word to them, so from any
  // thread while another waits in a collective: another rank of this host
  // that has died or is stopped, named. Nullopt while none is known to.
  virtual std::optional<std::string> fault() const { return std::nullopt; }
  // Rank 0 has ended the job (its end message came): this rank leaves with
  // the others. A rank other than 0 that leaves before that leaves alone, on
  // an error of its own, while rank 0 may wait for it in a collective: it
  // ends the whole job rather than wait at the door (MPI_Finalize waits for
  // every rank).
  virtual void job_ended() {}
};

}  // namespace ds
