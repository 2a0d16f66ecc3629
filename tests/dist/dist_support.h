// The world of a dist test: MPI's when the binary runs under mpirun (ctest runs test_dist alone and under
// mpirun -np 2 and -np 4), else one process. Each rank contributes values that depend on its rank, and the
// expectations are closed forms over the ranks, so every check holds for any world size.
#pragma once

#include <memory>

#include "dist/communicator.h"
#include "dist/mpi_communicator.h"

namespace myriad::test {

inline Communicator& test_world() {
  static SingleCommunicator single;
  return launched_by_mpirun() ? mpi_world() : static_cast<Communicator&>(single);
}

}  // namespace myriad::test
