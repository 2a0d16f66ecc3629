// Threading helpers of the CPU kernels: core/parallel.h's loops, and OpenBLAS's own thread count.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/parallel.h"
#include "core/threads.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace myriad::cpu {

// While alive, OpenBLAS runs single-threaded: for kernels that call sgemm from inside their own OpenMP
// threads (attention tiles), so the two thread pools do not oversubscribe the cores.
class BlasSingleThread {
 public:
  BlasSingleThread() : prev_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~BlasSingleThread() { openblas_set_num_threads(prev_); }
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;

 private:
  int prev_;
};

}  // namespace myriad::cpu
