// The machine's own ceilings, measured in the same run as the figures compared with them, so a benchmark
// reports "x % of what this machine does" rather than "x % of a datasheet" or "x % of a library":
//   - compute: the f32 FMA peak of the cores, a microkernel of independent multiply-adds in the widest vectors
//              the CPU offers (AVX-512, else AVX2), every thread at once; and the int8 peak of its VNNI
//              dot-product instruction where it has one (what the quantized products can reach);
//   - memory:  a STREAM triad a[i] = b[i] + s * c[i] over three arrays far larger than the caches, and a read
//              stream (sum of one such array), threaded with OpenMP, best of repeats.
// The GEMM library's sgemm 2048^3 (ops::gemm, whichever backend runs it) is measured too, as a figure beside
// the peak and never as a ceiling: a ceiling measured through a library moves with the library and cannot
// catch a slow one.
// NOTE: triad bytes follow STREAM's convention: 3 x 4 bytes per element (read b, read c, write a). The
// write-allocate read of a that the hardware also performs is not counted, and the op benchmarks count
// their outputs the same way (written once), so ratios compare like with like.
// Threads: myriad::num_threads() (the CLI's --threads / MYRIAD_THREADS), for OpenMP and OpenBLAS alike.
// Later benches (ops, serving, training MFU) share these numbers; what they leave out: no peak-FLOP
// datasheet figure, no per-cache-level bandwidth.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/timing.h"

namespace myriad {

// f32 FMA peak: 2 FLOPs per lane per FMA instruction, vectors of `isa` ("avx512": 16 lanes, "avx2": 8).
struct FmaPeak {
  std::string isa;
  double gflops = 0.0;
  Timing timing;
};

// int8 dot-product peak (VPDPBUSD: 4 multiply-adds of u8 x s8 per 32-bit lane), counted as 2 ops per
// multiply-add; isa is empty and gops 0 where the CPU has no VNNI.
struct VnniPeak {
  std::string isa;
  double gops = 0.0;
  Timing timing;
};

// GEMM figure (not a ceiling): C = A B on n x n matrices through ops::gemm.
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

// Read bandwidth: the sum of one array far larger than the caches, 4 bytes per element read.
struct ReadCeiling {
  int64_t elements = 0;
  double gbs = 0.0;
  Timing timing;
};

struct MachineLimits {
  int threads = 1;
  FmaPeak fma;         // the compute ceiling
  VnniPeak vnni;       // the int8 compute ceiling, where the CPU has VNNI
  TriadCeiling triad;  // the memory ceiling (copy-like streams)
  ReadCeiling read;    // the memory ceiling of read-only streams (decode's weights)
  SgemmCeiling sgemm;  // a figure: the GEMM backend on 2048^3
  std::string gemm;    // the GEMM backend and its kernel path (ops::gemm_backend_summary())

  // The f32 compute ceiling every GFLOP/s ratio is judged against: the FMA peak (the sgemm figure only on a CPU
  // without FMA, where myriad has no vector kernels to judge).
  double peak_gflops() const { return fma.gflops > 0 ? fma.gflops : sgemm.gflops; }
};

// The f32 FMA peak of all threads, best of repeats.
FmaPeak measure_fma_peak(double budget_s);

// The int8 VNNI peak of all threads; empty where the CPU has no VNNI.
VnniPeak measure_vnni_peak(double budget_s);

// sgemm C = A B on n x n matrices through ops::gemm (the chosen backend), best-of-repeats GFLOP/s (2 n^3 FLOPs
// per call).
SgemmCeiling measure_sgemm(int64_t n, double budget_s);

// The read stream over an array of array_bytes, best-of-repeats GB/s.
ReadCeiling measure_read(int64_t array_bytes, double budget_s);

// Bytes per triad array: 4x the last-level cache this process sees (STREAM's rule, so that a pass streams DRAM and
// not the cache), at least 64 MiB and at most 1 GiB. Server parts have L3s of hundreds of MiB (an Intel Xeon of
// model 207 reports 260 MiB): fixed 64 MiB arrays fit there, and back-to-back passes then measured the L3
// (48 GB/s) where a pass after other work streamed DRAM at 28.
int64_t triad_array_bytes();
int64_t last_level_cache_bytes();  // from sysfs (cpu0's highest cache index); 0 where unknown

// The STREAM triad kernel over three arrays it owns, first touched by the threads that use them. Kept as an
// object so a bench can time it interleaved with the op it measures: on a shared machine the memory
// bandwidth on offer drifts (1.5x within minutes on the development VM), and a ceiling sampled in the same
// moments as the figure keeps their ratio meaningful.
class Triad {
 public:
  explicit Triad(int64_t array_bytes = triad_array_bytes());
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

// Every ceiling and the sgemm figure with the defaults above; budget_s is split between them.
MachineLimits measure_machine_limits(double budget_s);

}  // namespace myriad
