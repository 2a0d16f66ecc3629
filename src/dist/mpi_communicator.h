// CPU ranks over MPI (Debian's OpenMPI): the collectives of dist/communicator.h on host buffers, one MPI
// communicator each. Errors return (MPI_ERRORS_RETURN) and are thrown as kIo naming the collective and MPI's
// message. Counts above INT_MAX are split into pieces for the reductions and broadcasts; the gathers and the
// all-to-all refuse them (MPI 3's int counts) with a message.
//
// mpi_world() initialises MPI on first use (MPI_THREAD_SERIALIZED: one thread at a time calls MPI, the main one or
// a server's engine thread; OpenMP threads compute) and finalises it at exit. launched_by_mpirun() tells from the
// environment whether this process is one rank of an mpirun job, so that a plain `myriad train` never touches MPI.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace myriad {

bool launched_by_mpirun();

// The world communicator of this MPI job (MPI_COMM_WORLD), initialising MPI on the first call.
Communicator& mpi_world();
// Whether mpi_world() has initialised MPI (the CLI aborts the whole job on an error only then).
bool mpi_initialized();
// The MPI library's own version line ("Open MPI v4.1.4, package: ..."), first line only; callable before MPI starts.
std::string mpi_library_version();
// MPI_Abort on the world: every rank ends, with exit code `code`.
[[noreturn]] void mpi_abort(int code);

}  // namespace myriad
