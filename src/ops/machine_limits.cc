#include "ops/machine_limits.h"

// NOTE: GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (_mm512_reduce_add_*), which
// -Wuninitialized reports wherever they are inlined (as in ops/cpu/gemm.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/threads.h"
#include "ops/gemm_backend.h"
#include "ops/kernels.h"

namespace myriad {

namespace {

using Floats = std::unique_ptr<float[], void (*)(void*)>;

Floats aligned_floats(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  MYRIAD_REQUIRE(p != nullptr, kOutOfMemory, "bench: cannot allocate ", bytes, " bytes");
  return Floats(p, std::free);
}

// The peak microkernels: kChains independent accumulators, each updated once per iteration, so the FMA units
// never wait on a result (latency 4 cycles x 2 units needs 8 in flight; 12 leaves margin and fits the 16
// registers of AVX2). a = a * m + c with m just below 1 keeps every value finite and normal however long it runs.
// Each returns a sum of the accumulators so that the work cannot be optimised away.
constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters) {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1.0f + 0.01f * float(i));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  __m512 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters) {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1.0f + 0.01f * float(i));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  __m256 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, a[i]);
  alignas(32) float f[8];
  _mm256_store_ps(f, s);
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}

// VPDPBUSD: per 32-bit lane, 4 products of u8 x s8 added to the accumulator. Inputs of 1 keep the sums exact.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int vnni_chains_avx512(int64_t iters) {
  __m512i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(1);
  for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_dpbusd_epi32(a[i], u, s);
  __m512i t = a[0];
  for (int i = 1; i < kChains; ++i) t = _mm512_add_epi32(t, a[i]);
  return _mm512_reduce_add_epi32(t);
}

__attribute__((target("avx2,avxvnni"))) int vnni_chains_avx(int64_t iters) {
  __m256i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_epi32(i);
  const __m256i u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(1);
  for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_dpbusd_avx_epi32(a[i], u, s);
  __m256i t = a[0];
  for (int i = 1; i < kChains; ++i) t = _mm256_add_epi32(t, a[i]);
  alignas(32) int f[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(f), t);
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}

// Runs kernel(iters) on every thread at once; the region's wall time is the call's time.
template <class Kernel>
Timing time_all_threads(Kernel kernel, int64_t iters, double budget_s) {
  volatile double sink = 0;
  return time_repeats(
      [&] {
        double s = 0;
#pragma omp parallel num_threads(num_threads()) reduction(+ : s)
        s += double(kernel(iters));
        sink = sink + s;
      },
      budget_s, 5);
}

}  // namespace

FmaPeak measure_fma_peak(double budget_s) {
  FmaPeak p;
  const CpuInfo& cpu = cpu_info();
  p.isa = cpu.fma_isa();
  constexpr int64_t kIters = 1 << 20;  // 12 M FMA instructions per thread: ~6 ms at 2 per cycle and 1 GHz
  int lanes = 0;
  if (p.isa == "avx512") {
    p.timing = time_all_threads(fma_chains_avx512, kIters, budget_s), lanes = 16;
  } else if (p.isa == "avx2") {
    p.timing = time_all_threads(fma_chains_avx2, kIters, budget_s), lanes = 8;
  } else {
    return p;  // no FMA: no vector kernel of myriad's targets this machine; the peak stays 0 (benches say so)
  }
  const double flops = 2.0 * lanes * kChains * double(kIters) * num_threads();
  p.gflops = flops / p.timing.best_s * 1e-9;
  return p;
}

VnniPeak measure_vnni_peak(double budget_s) {
  VnniPeak p;
  const CpuInfo& cpu = cpu_info();
  p.isa = cpu.vnni_isa();
  constexpr int64_t kIters = 1 << 20;
  int lanes = 0;
  if (p.isa == "avx512-vnni") {
    p.timing = time_all_threads(vnni_chains_avx512, kIters, budget_s), lanes = 16;
  } else if (p.isa == "avx-vnni") {
    p.timing = time_all_threads(vnni_chains_avx, kIters, budget_s), lanes = 8;
  } else {
    return p;
  }
  const double ops = 2.0 * 4 * lanes * kChains * double(kIters) * num_threads();  // 4 MACs per lane, 2 ops each
  p.gops = ops / p.timing.best_s * 1e-9;
  return p;
}

SgemmCeiling measure_sgemm(int64_t n, double budget_s) {
  SgemmCeiling c;
  c.n = n;
  const int64_t nn = n * n;
  Floats A = aligned_floats(nn), B = aligned_floats(nn), C = aligned_floats(nn);
  for (int64_t i = 0; i < nn; ++i) {
    A[size_t(i)] = float(i % 7) * 0.25f - 0.75f;
    B[size_t(i)] = float(i % 5) * 0.25f - 0.5f;
    C[size_t(i)] = 0.0f;
  }
  c.timing = time_repeats(
      [&] { ops::gemm(Device::kCPU, false, false, n, n, n, 1.0f, A.get(), n, B.get(), n, 0.0f, C.get(), n); }, budget_s,
      3);
  c.gflops = 2.0 * double(n) * double(n) * double(n) / c.timing.best_s * 1e-9;
  return c;
}

int64_t last_level_cache_bytes() {
  // cpu0's caches: index0..N; the highest level's size ("260M", "32768K").
  int64_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
    int64_t bytes = 0;
    size_t k = 0;
    while (k < size.size() && std::isdigit(static_cast<unsigned char>(size[k]))) bytes = bytes * 10 + (size[k++] - '0');
    const char unit = k < size.size() ? size[k] : 'B';
    bytes <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    if (level > best_level || (level == best_level && bytes > best)) best_level = level, best = bytes;
  }
  return best;
}

int64_t triad_array_bytes() {
  static const int64_t bytes =
      std::clamp<int64_t>(4 * last_level_cache_bytes(), int64_t(64) << 20, int64_t(1) << 30) / 64 * 64;
  return bytes;
}

Triad::Triad(int64_t array_bytes)
    : n_(array_bytes / int64_t(sizeof(float))), a_(aligned_floats(n_)), b_(aligned_floats(n_)), c_(aligned_floats(n_)) {
  float *a = a_.get(), *b = b_.get(), *c = c_.get();
  const int64_t n = n_;
  // First touch with the same static schedule as run(), so pages sit near the threads that use them.
#pragma omp parallel for simd num_threads(num_threads()) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
}

void Triad::run() {
  float* a = a_.get();
  const float *b = b_.get(), *c = c_.get();
  const float s = 3.0f;
  const int64_t n = n_;
#pragma omp parallel for simd num_threads(num_threads()) schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

TriadCeiling measure_triad(int64_t array_bytes, double budget_s) {
  Triad triad(array_bytes);
  TriadCeiling c;
  c.elements = triad.elements();
  c.timing = time_repeats([&] { triad.run(); }, budget_s, 5);
  c.gbs = triad.bytes_per_pass() / c.timing.best_s * 1e-9;
  return c;
}

ReadCeiling measure_read(int64_t array_bytes, double budget_s) {
  ReadCeiling c;
  c.elements = array_bytes / int64_t(sizeof(float));
  const int64_t n = c.elements / 64 * 64;
  Floats a = aligned_floats(n);
  float* p = a.get();
#pragma omp parallel for simd num_threads(num_threads()) schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
  volatile float sink = 0;
  c.timing = time_repeats(
      [&] {
        float total = 0;
    // Four independent vector sums per thread (a single one would wait on the add latency, not memory).
#pragma omp parallel num_threads(num_threads()) reduction(+ : total)
        {
          const int t = omp_get_thread_num(), nt = omp_get_num_threads();
          const int64_t begin = n / 64 * t / nt * 64, end = n / 64 * (t + 1) / nt * 64;
          float s[64] = {};
          for (int64_t i = begin; i < end; i += 64)
#pragma omp simd
            for (int j = 0; j < 64; ++j) s[j] += p[i + j];
          for (float v : s) total += v;
        }
        sink = sink + total;
      },
      budget_s, 5);
  c.gbs = double(n) * sizeof(float) / c.timing.best_s * 1e-9;
  return c;
}

MachineLimits measure_machine_limits(double budget_s) {
  MachineLimits m;
  m.threads = num_threads();
  // The compute peaks get at least a quarter second each: on a VM a vCPU can lose tens of milliseconds to its host,
  // and a 3-second bench's share (60 ms) once read half the peak (make bench-peers: sgemm at "192%" of it).
  m.fma = measure_fma_peak(std::max(0.25, 0.1 * budget_s));
  m.vnni = measure_vnni_peak(std::max(0.25, 0.1 * budget_s));
  m.sgemm = measure_sgemm(2048, 0.35 * budget_s);
  m.triad = measure_triad(triad_array_bytes(), 0.3 * budget_s);
  m.read = measure_read(triad_array_bytes() * 3, 0.15 * budget_s);
  m.gemm = ops::gemm_backend_summary();
  return m;
}

}  // namespace myriad
