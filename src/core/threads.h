// Thread count for OpenMP kernels and OpenBLAS. Default: all cores; MYRIAD_THREADS or --threads override.
#pragma once

#include <cstdint>

namespace myriad {

int num_threads();
void set_num_threads(int n);  // n <= 0: all cores
// Reads MYRIAD_THREADS (if set) and applies it; called once by the CLI and the tests.
void init_threads_from_env();

}  // namespace myriad
