// Threading helpers of the CPU kernels: core/parallel.h's loops, and OpenBLAS's own thread count (ops/serial_blas.h
// turns it down to one where a kernel calls sgemm from its own threads).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/parallel.h"
#include "core/threads.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);
