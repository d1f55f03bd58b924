#pragma once
// Which part of a model one rank holds under tensor parallelism (Megatron's
// split): attention heads and FFN columns in rank order, rank r holding the
// r-th of `ranks` equal parts; the layers' outputs are summed across ranks.

#include <cstdint>

namespace ds {

struct RankLayout {
  int rank = 0;
  int ranks = 1;  // 1: the whole model in one process
  // Expert parallel: the routed experts divided among the ranks whole (rank r
  // the r-th part), not each expert's width.
  bool experts_whole = false;
  bool split() const { return ranks > 1; }
};

// How a loaded tensor is divided among the ranks: not (every rank holds it
// whole), by rows (output features: q, k, v, gate, up), by columns (input
// features: the attention output and FFN down projections, whose partial
// outputs the ranks sum), or, for stacked matrices (experts), by slices.
enum class Split { none, rows, columns, slices };

}  // namespace ds
