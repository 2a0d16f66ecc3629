#include "ops/machine_limits.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "core/threads.h"

namespace myriad {

namespace {

using Floats = std::unique_ptr<float[], void (*)(void*)>;

Floats aligned_floats(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  MYRIAD_REQUIRE(p != nullptr, kOutOfMemory, "bench: cannot allocate ", bytes, " bytes");
  return Floats(p, std::free);
}

}  // namespace

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
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, A.get(), int(n), B.get(),
                    int(n), 0.0f, C.get(), int(n));
      },
      budget_s, 3);
  c.gflops = 2.0 * double(n) * double(n) * double(n) / c.timing.best_s * 1e-9;
  return c;
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

MachineLimits measure_machine_limits(double budget_s) {
  MachineLimits m;
  m.threads = num_threads();
  m.sgemm = measure_sgemm(2048, 0.6 * budget_s);
  m.triad = measure_triad(kTriadArrayBytes, 0.4 * budget_s);
  return m;
}

}  // namespace myriad
