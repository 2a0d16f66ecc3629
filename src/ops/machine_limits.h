// The machine's own ceilings, measured in the same run as the figures compared with them, so a benchmark
// reports "x % of what this machine does" rather than "x % of a datasheet":
//   - compute: OpenBLAS sgemm on n x n x n (n = 2048 by default), all threads, best of repeats;
//   - memory:  a STREAM triad a[i] = b[i] + s * c[i] over three arrays far larger than the caches,
//              threaded with OpenMP, best of repeats.
// NOTE: triad bytes follow STREAM's convention: 3 x 4 bytes per element (read b, read c, write a). The
// write-allocate read of a that the hardware also performs is not counted, and the op benchmarks count
// their outputs the same way (written once), so ratios compare like with like.
// Threads: myriad::num_threads() (the CLI's --threads / MYRIAD_THREADS), for OpenMP and OpenBLAS alike.
// Later benches (ops, serving, training MFU) share these numbers; what they leave out: no peak-FLOP
// datasheet figure, no per-cache-level bandwidth.
#pragma once

#include <cstdint>
#include <memory>

#include "core/timing.h"

namespace myriad {

struct SgemmCeiling {
  int64_t n = 2048;  // M = N = K
  double gflops = 0.0;
  Timing timing;
};

struct TriadCeiling {
  int64_t elements = 0;                     // per array
  static constexpr int kBytesPerElem = 12;  // read b, read c, write a (STREAM convention)
  double gbs = 0.0;                         // 1e9 bytes per second
  Timing timing;
};

struct MachineLimits {
  int threads = 1;
  SgemmCeiling sgemm;
  TriadCeiling triad;
};

// sgemm C = A B on n x n matrices through OpenBLAS, best-of-repeats GFLOP/s (2 n^3 FLOPs per call).
SgemmCeiling measure_sgemm(int64_t n, double budget_s);

constexpr int64_t kTriadArrayBytes = int64_t(64) << 20;  // per array: far beyond the L3 of laptops and CCDs

// The STREAM triad kernel over three arrays it owns, first touched by the threads that use them. Kept as an
// object so a bench can time it interleaved with the op it measures: on a shared machine the memory
// bandwidth on offer drifts (1.5x within minutes on the development VM), and a ceiling sampled in the same
// moments as the figure keeps their ratio meaningful.
class Triad {
 public:
  explicit Triad(int64_t array_bytes = kTriadArrayBytes);
  void run();  // one pass: a = b + s * c, threaded with OpenMP
  int64_t elements() const { return n_; }
  double bytes_per_pass() const { return double(TriadCeiling::kBytesPerElem) * double(n_); }

 private:
  using Floats = std::unique_ptr<float[], void (*)(void*)>;  // 64-byte aligned, freed with std::free
  int64_t n_;
  Floats a_, b_, c_;
};

// STREAM triad over three arrays of array_bytes each, best-of-repeats GB/s.
TriadCeiling measure_triad(int64_t array_bytes, double budget_s);

// Both ceilings with the defaults above; budget_s is split between them.
MachineLimits measure_machine_limits(double budget_s);

}  // namespace myriad
