// Host threads for loops over independent parts (OpenMP underneath, sized by core/threads.h's num_threads()):
// the CPU kernels split their rows with these, and so does host-side work above them (balancing statistics,
// block-format products, the decoders' page loops).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/threads.h"

namespace myriad {

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

// Runs body(t, nt) on nt = `threads` threads (t = 0 .. nt-1: an OpenMP parallel region), or body(0, 1) on this
// thread when that is one thread or when called from inside a region already (so a product inside a parallel loop
// over experts computes whole on its thread). Why not `#pragma omp parallel if (...)`: libgomp builds (allocates)
// a team for every region entered, even a one-thread or nested one; in decode, with hundreds of small products a
// token, those allocations were most of the malloc time left.
template <class F>
void parallel_region(int threads, F&& body) {
  if (threads > 1 && !omp_in_parallel()) {
#pragma omp parallel num_threads(threads)
    body(omp_get_thread_num(), omp_get_num_threads());
  } else {
    body(0, 1);
  }
}

// Part t of nt of [0, n): contiguous, sizes differing by at most one.
inline int64_t part_begin(int64_t n, int t, int nt) {
  return n * t / nt;
}

}  // namespace myriad
