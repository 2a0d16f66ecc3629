// `myriad bench dist` (issue 16), run under mpirun: the expert-parallel all-to-all at the sizes an MoE layer
// sends, through myriad's communicator against MPI's own MPI_Alltoallv on the same buffers in the same run
// (interleaved repeats, each the slowest rank's time; target: within 10%), and the whole dispatch + combine of
// ExpertParallelDispatcher (counts exchange, rows both ways, permutations) beside twice the raw all-to-all of its
// rows (informational).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace myriad::bench {

struct DistBenchRow {
  std::string what;           // "all_to_all_v" or "dispatch+combine"
  std::string shape;          // e.g. "4096 copies x 1024 f32 per rank"
  double bytes_per_rank = 0;  // sent by one rank per call (all destinations, its own block included)
  double ours_s = 0;          // best over repeats of the slowest rank's time
  double mpi_s = 0;           // the baseline's, same convention
  double ratio() const { return mpi_s > 0 ? ours_s / mpi_s : 0; }  // time ours / time MPI's (1 = equal)
  bool targeted = false;
  bool pass() const { return !targeted || ratio() <= 1.10; }
};

// Collective: every rank of world calls it with the same budget. Rows in order, printed by the caller (rank 0).
std::vector<DistBenchRow> run_dist_bench(Communicator& world, double seconds);

}  // namespace myriad::bench
