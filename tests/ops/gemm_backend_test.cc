// The GEMM backends (ops/gemm_backend.h): every library myriad can route a product to, and ops::gemm as routed,
// against a double-precision loop over every transpose combination and the shapes of each routing class (small,
// A^T with a large output, the rest), with padded leading dimensions whose gaps must stay untouched; ops::gemm
// also under a ScopedSerialBlas and from inside a parallel region (the two ways kernels call it). Then the rule
// that refuses a generic OpenBLAS kernel, on synthetic CPUs, and the CPU and ceiling facts the benches print.
#include "ops/gemm_backend.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_info.h"
#include "core/threads.h"
#include "ops/kernels.h"
#include "ops/machine_limits.h"
#include "ops/serial_blas.h"

namespace myriad {
namespace {

struct Shape {
  int64_t M, N, K;
};

// A product with padded leading dimensions; C starts as a sentinel pattern so beta and the gaps are checked.
struct Product {
  bool ta, tb;
  Shape s;
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C;
  Product(bool ta_, bool tb_, Shape s_, std::mt19937& rng) : ta(ta_), tb(tb_), s(s_) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 2;
    A.resize(size_t((ta ? s.K : s.M) * lda));
    B.resize(size_t((tb ? s.N : s.K) * ldb));
    C.assign(size_t(s.M * ldc), -7.0f);
    for (float& v : A) v = n01(rng);
    for (float& v : B) v = n01(rng);
  }
  double a(int64_t i, int64_t k) const { return A[size_t(ta ? k * lda + i : i * lda + k)]; }
  double b(int64_t k, int64_t j) const { return B[size_t(tb ? j * ldb + k : k * ldb + j)]; }
  // C = alpha A B + beta C0 against the double loop; C0 was the sentinel -7 everywhere.
  void check(float alpha, float beta, const std::string& what) const {
    for (int64_t i = 0; i < s.M; ++i) {
      for (int64_t j = 0; j < s.N; ++j) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < s.K; ++k) ref += a(i, k) * b(k, j), mag += std::abs(a(i, k) * b(k, j));
        ref = double(alpha) * ref + double(beta) * -7.0;
        // NOTE: f32 products summed in a different order (blocked, possibly split over threads): the error is
        // bounded by about K units of rounding of the sum of magnitudes; 2^-24 K |a||b| with a factor 4 of slack
        // for the split partial sums, plus the beta term's one rounding.
        const double tol = 4.0 * double(s.K + 2) * 0x1p-24 * (std::abs(alpha) * mag + 7.0 * std::abs(beta)) + 1e-6;
        ASSERT_NEAR(C[size_t(i * ldc + j)], ref, tol) << what << " at (" << i << ", " << j << ")";
      }
      for (int64_t j = s.N; j < ldc; ++j) ASSERT_EQ(C[size_t(i * ldc + j)], -7.0f) << what << ": gap written";
    }
  }
};

std::string name(bool ta, bool tb, Shape s) {
  return std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " " + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
         std::to_string(s.K);
}

// Shapes of every routing class: tiny and odd, the small class's boundary (64^3 = 2^18 multiply-adds), A^T with
// an output of 2^19 and more, a mid-sized one, and one row.
const Shape kShapes[] = {{1, 1, 1},       {3, 5, 7},      {64, 64, 64},  {65, 64, 64},
                         {1024, 512, 24}, {200, 130, 96}, {1, 300, 257}, {37, 1, 513}};

TEST(GemmBackend, EveryLibraryMatchesADoubleLoop) {
  std::mt19937 rng(7);
  std::vector<ops::GemmLibrary> libs = {ops::GemmLibrary::kOpenBlas};
  if (ops::onednn_available()) libs.push_back(ops::GemmLibrary::kOneDnn);
  for (const ops::GemmLibrary lib : libs)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const Shape s : kShapes) {
          Product p(ta, tb, s, rng);
          ops::gemm_on(lib, ta, tb, s.M, s.N, s.K, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f, p.C.data(), p.ldc);
          p.check(1.0f, 0.0f, (lib == ops::GemmLibrary::kOneDnn ? "oneDNN " : "OpenBLAS ") + name(ta, tb, s));
        }
}

TEST(GemmBackend, RoutedGemmMatchesADoubleLoopWithAlphaBetaAndBatches) {
  std::mt19937 rng(11);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const Shape s : kShapes) {
        Product p(ta, tb, s, rng);
        ops::gemm(Device::kCPU, ta, tb, s.M, s.N, s.K, 0.5f, p.A.data(), p.lda, p.B.data(), p.ldb, -0.25f, p.C.data(),
                  p.ldc);
        p.check(0.5f, -0.25f, "ops::gemm " + name(ta, tb, s));
      }
  // A batch of three with strides: each must be its own product.
  const Shape s{64, 48, 40};
  std::vector<Product> ps;
  for (int b = 0; b < 3; ++b) ps.emplace_back(false, true, s, rng);
  const size_t sa = ps[0].A.size(), sb = ps[0].B.size(), sc = ps[0].C.size();
  std::vector<float> A(3 * sa), B(3 * sb), C(3 * sc);
  for (int b = 0; b < 3; ++b) {
    std::copy(ps[size_t(b)].A.begin(), ps[size_t(b)].A.end(), A.begin() + long(b * sa));
    std::copy(ps[size_t(b)].B.begin(), ps[size_t(b)].B.end(), B.begin() + long(b * sb));
    std::copy(ps[size_t(b)].C.begin(), ps[size_t(b)].C.end(), C.begin() + long(b * sc));
  }
  ops::gemm(Device::kCPU, false, true, s.M, s.N, s.K, 1.0f, A.data(), ps[0].lda, B.data(), ps[0].ldb, 0.0f, C.data(),
            ps[0].ldc, 3, int64_t(sa), int64_t(sb), int64_t(sc));
  for (int b = 0; b < 3; ++b) {
    std::copy(C.begin() + long(b * sc), C.begin() + long((b + 1) * sc), ps[size_t(b)].C.begin());
    ps[size_t(b)].check(1.0f, 0.0f, "batch " + std::to_string(b));
  }
}

// Kernels call ops::gemm under a ScopedSerialBlas and from their own parallel loops; both must compute the same
// products (and leave this thread's OpenMP thread count as it was).
TEST(GemmBackend, SerialScopeAndParallelCallersGiveTheProduct) {
  std::mt19937 rng(13);
  const int threads_before = omp_get_max_threads();
  {
    ops::ScopedSerialBlas single;
    EXPECT_TRUE(ops::serial_blas_active());
    Product p(false, true, {300, 200, 150}, rng);
    ops::gemm(Device::kCPU, false, true, 300, 200, 150, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f, p.C.data(),
              p.ldc);
    p.check(1.0f, 0.0f, "under ScopedSerialBlas");
  }
  EXPECT_FALSE(ops::serial_blas_active());
  EXPECT_EQ(omp_get_max_threads(), threads_before);
  std::vector<Product> ps;
  for (int t = 0; t < 4; ++t) ps.emplace_back(t % 2 == 1, false, Shape{96, 80, 72}, rng);
#pragma omp parallel for num_threads(2)
  for (int t = 0; t < 4; ++t) {
    Product& p = ps[size_t(t)];
    ops::gemm(Device::kCPU, p.ta, false, 96, 80, 72, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f, p.C.data(),
              p.ldc);
  }
  for (int t = 0; t < 4; ++t) ps[size_t(t)].check(1.0f, 0.0f, "from a parallel loop " + std::to_string(t));
  EXPECT_EQ(omp_get_max_threads(), threads_before);
}

CpuInfo synthetic_cpu(bool avx2, bool avx512) {
  CpuInfo c;
  c.avx2 = c.fma = avx2;
  c.avx512f = c.avx512bw = c.avx512vl = avx512;
  return c;
}

TEST(GemmBackend, AGenericOpenBlasKernelIsRecognised) {
  const CpuInfo avx512 = synthetic_cpu(true, true), avx2 = synthetic_cpu(true, false),
                sse = synthetic_cpu(false, false);
  // Debian's 0.3.21 on a Xeon newer than itself: "Prescott", the SSE3 kernels.
  EXPECT_TRUE(ops::openblas_kernel_is_generic_for("Prescott", avx512));
  EXPECT_TRUE(ops::openblas_kernel_is_generic_for("Prescott", avx2));
  EXPECT_TRUE(ops::openblas_kernel_is_generic_for("Nehalem", avx2));
  // AVX2 kernels leave half of an AVX-512 core unused: not this CPU's kernel either.
  EXPECT_TRUE(ops::openblas_kernel_is_generic_for("Haswell", avx512));
  EXPECT_FALSE(ops::openblas_kernel_is_generic_for("SkylakeX", avx512));
  EXPECT_FALSE(ops::openblas_kernel_is_generic_for("COOPERLAKE", avx512));
  EXPECT_FALSE(ops::openblas_kernel_is_generic_for("Haswell", avx2));
  EXPECT_FALSE(ops::openblas_kernel_is_generic_for("Zen", avx2));
  EXPECT_FALSE(ops::openblas_kernel_is_generic_for("Prescott", sse));  // its best kernel on an SSE-only CPU
  EXPECT_EQ(ops::openblas_coretype_for(avx512), "SkylakeX");
  EXPECT_EQ(ops::openblas_coretype_for(avx2), "Haswell");
  EXPECT_EQ(ops::openblas_coretype_for(sse), "");
}

TEST(GemmBackend, TheChosenBackendIsNamedAndNeverAGenericOpenBlasUnnamed) {
  const ops::GemmBackend& b = ops::gemm_backend();
  EXPECT_FALSE(b.name.empty());
  EXPECT_FALSE(b.kernel.empty());
  if (b.library == ops::GemmLibrary::kOpenBlas && ops::openblas_kernel_is_generic()) {
    EXPECT_NE(b.kernel.find("generic"), std::string::npos) << b.kernel;
  }
  const std::string paths = ops::compute_paths("  ");
  EXPECT_NE(paths.find(cpu_info().fma_isa() == "sse" ? "sse only" : cpu_info().fma_isa()), std::string::npos) << paths;
  EXPECT_NE(paths.find(b.name), std::string::npos) << paths;
}

TEST(CpuInfo, FlagsAreConsistentAndTheBuildRunsHere) {
  const CpuInfo& c = cpu_info();
  EXPECT_FALSE(c.vendor.empty());
  if (c.avx512f) {
    EXPECT_EQ(c.fma_isa(), "avx512");
  }
  if (!c.avx2) {
    EXPECT_NE(c.fma_isa(), "avx2");
  }
  if (c.avx512_vnni && c.avx512bw) {
    EXPECT_EQ(c.vnni_isa(), "avx512-vnni");
  }
  std::string missing;
  EXPECT_TRUE(cpu_runs_build(&missing)) << "built for an ISA this CPU lacks: " << missing;
#if defined(__AVX512F__)
  EXPECT_EQ(kernel_isa_path().rfind("avx512", 0), 0u);
  EXPECT_TRUE(c.avx512f);
#elif defined(__AVX2__)
  EXPECT_EQ(kernel_isa_path().rfind("avx2", 0), 0u);
#endif
}

// The FMA peak is a physical ceiling: no product can beat it. A peak microkernel that undercounts (too few
// independent chains, a narrower vector than the CPU has) would let sgemm pass it. On one thread: ctest runs two
// tests at once on a 2-core machine, and a one-thread figure only slows while shared (best of repeats recovers it),
// where a two-thread region waits for whichever thread the scheduler preempted.
TEST(MachineLimits, SgemmStaysBelowTheFmaPeak) {
#if defined(__OPTIMIZE__)
  struct RestoreThreads {
    int n = num_threads();
    ~RestoreThreads() { set_num_threads(n); }
  } restore;
  set_num_threads(1);
  const FmaPeak peak = measure_fma_peak(0.3);
  if (peak.isa == "sse") GTEST_SKIP() << "no FMA on this CPU";
  ASSERT_GT(peak.gflops, 0.0);
  const SgemmCeiling g = measure_sgemm(512, 0.3);
  // NOTE: 15% of slack for the noise of a shared machine (each figure is the best of its repeats, but the two are
  // sampled at different moments).
  EXPECT_LT(g.gflops, 1.15 * peak.gflops) << "sgemm " << g.gflops << " GFLOP/s above the FMA peak " << peak.gflops;
  const VnniPeak v = measure_vnni_peak(0.3);
  if (!cpu_info().vnni_isa().empty()) {
    EXPECT_GT(v.gops, peak.gflops) << "an int8 dot product does 4x an FMA's work";
  }
#else
  GTEST_SKIP() << "timing in an unoptimised build measures the compiler, not the machine";
#endif
}

}  // namespace
}  // namespace myriad
