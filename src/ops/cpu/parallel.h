// Threading helpers for the CPU kernels (OpenMP underneath).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/threads.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace myriad::cpu {

// Runs fn(begin, end) over [0, n) in contiguous chunks of at least `grain` items, one chunk per thread.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  const int threads = int(std::min<int64_t>(num_threads(), max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  }
}

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
