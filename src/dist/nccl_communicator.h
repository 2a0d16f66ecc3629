// GPU ranks over NCCL (CUDA builds, MYRIAD_WITH_CUDA): the collectives of dist/communicator.h on device
// buffers, one NCCL communicator and one CUDA stream each. The NCCL unique id travels over an existing host
// communicator (MPI), so an `mpirun -np N` job with one GPU per rank gets both: MPI for the host-side
// statistics, NCCL for gradients and token exchange. Each collective is enqueued on the stream and waited for
// (blocking, as the MPI ones): overlap is left to a later change. Errors are thrown as kIo naming the
// collective and ncclGetErrorString.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace myriad {

// Whether this build has NCCL (a CUDA build) and this process sees a GPU.
bool nccl_available();
// One NCCL rank per rank of `host` (its rank and size), on GPU `device_index` of this process. Throws
// kUnsupported in builds without CUDA, or when no GPU is visible.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, int device_index);

}  // namespace myriad
