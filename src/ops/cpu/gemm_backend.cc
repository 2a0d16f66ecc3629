// The GEMM library choice (ops/gemm_backend.h) and the threading each library needs.
#include "ops/gemm_backend.h"

#include <cblas.h>
#include <omp.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifdef MYRIAD_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/threads.h"
#include "ops/serial_blas.h"

extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

namespace myriad::ops {

namespace {

#ifdef MYRIAD_ONEDNN
std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "isa " + std::to_string(int(isa));
  }
}
#endif

std::string openblas_version() {
  // openblas_get_config() reads "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..." : its first two words.
  const std::string c = openblas_get_config();
  const auto sp = c.find(' ', c.find(' ') + 1);
  return sp == std::string::npos ? c : c.substr(0, sp);
}

GemmBackend openblas_backend(const std::string& why) {
  GemmBackend b;
  b.library = GemmLibrary::kOpenBlas;
  b.name = openblas_version();
  b.kernel = openblas_kernel() + (openblas_kernel_is_generic() ? " (generic for this CPU)" : "");
  b.why = why;
  return b;
}

GemmBackend choose() {
  const char* env = std::getenv("MYRIAD_GEMM");
  const std::string want = env && *env ? env : "auto";
  MYRIAD_REQUIRE(want == "auto" || want == "onednn" || want == "openblas", kValue, "MYRIAD_GEMM=", want,
                 ": must be auto, onednn or openblas");
  GemmBackend b;
  if (want != "openblas" && onednn_available()) {
#ifdef MYRIAD_ONEDNN
    const dnnl_version_t* v = dnnl_version();
    b.library = GemmLibrary::kOneDnn;
    b.name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    b.kernel = "JIT, up to " + onednn_isa_name(dnnl_get_effective_cpu_isa());
    b.why = want == "auto" ? "auto: kernels by the CPU's ISA, the fastest measured" : "MYRIAD_GEMM=onednn";
    b.route_to_openblas = want == "auto" && !openblas_kernel_is_generic();
    if (b.route_to_openblas)
      b.why += "; small NN/TN and large-output TN products on " + openblas_version() + " " + openblas_kernel();
#endif
    return b;
  }
  MYRIAD_REQUIRE(want != "onednn", kValue, "MYRIAD_GEMM=onednn: this build has no oneDNN (MYRIAD_ONEDNN is off)");
  b = openblas_backend(want == "auto" ? "auto: oneDNN not built in" : "MYRIAD_GEMM=openblas");
  if (openblas_kernel_is_generic()) {
    const std::string fix = openblas_coretype_for_cpu();
    std::fprintf(
        stderr, "myriad: warning: OpenBLAS runs its %s kernels on this %s CPU (%s), a fraction of its speed%s%s%s\n",
        openblas_kernel().c_str(), cpu_info().fma_isa().c_str(), cpu_info().brand.c_str(),
        fix.empty() ? "" : "; set OPENBLAS_CORETYPE=", fix.c_str(), onednn_available() ? " or MYRIAD_GEMM=onednn" : "");
  }
  return b;
}

}  // namespace

bool onednn_available() {
#ifdef MYRIAD_ONEDNN
  return true;
#else
  return false;
#endif
}

std::string openblas_kernel() {
  const char* c = openblas_get_corename();
  return c ? c : "unknown";
}

std::string openblas_coretype_for_cpu() {
  return openblas_coretype_for(cpu_info());
}

std::string openblas_coretype_for(const CpuInfo& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  return "";
}

bool openblas_kernel_is_generic() {
  return openblas_kernel_is_generic_for(openblas_kernel(), cpu_info());
}

bool openblas_kernel_is_generic_for(const std::string& kernel, const CpuInfo& cpu) {
  std::string k = kernel;
  for (char& ch : k) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  // OpenBLAS's core names whose kernels use AVX-512, and those that use AVX2 (or AVX-512).
  const char* avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
  const char* avx2[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};
  auto any = [&](const auto& names) {
    for (const char* n : names)
      if (k == n) return true;
    return false;
  };
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl) return !any(avx512);
  if (cpu.avx2 && cpu.fma) return !any(avx2);
  return false;  // an older CPU: whatever OpenBLAS picked is its kernel for it
}

const GemmBackend& gemm_backend() {
  static const GemmBackend b = choose();
  return b;
}

GemmLibrary gemm_library_for(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  const GemmBackend& b = gemm_backend();
  if (!b.route_to_openblas) return b.library;
  const bool small = M * N * K <= kSmallProductMacs;
  if ((small && (ta || !tb)) || (ta && M * N >= kLargeTransposedOutputs)) return GemmLibrary::kOpenBlas;
  return b.library;
}

std::string gemm_backend_summary() {
  const GemmBackend& b = gemm_backend();
  return b.name + " (" + b.kernel + " kernels; " + b.why + ")";
}

void gemm_on(GemmLibrary library, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
             int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (library == GemmLibrary::kOpenBlas) {  // on OpenBLAS's own thread count (ScopedSerialBlas: one)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    return;
  }
#ifdef MYRIAD_ONEDNN
  // oneDNN (OpenMP runtime) threads a call over omp_get_max_threads() of the calling thread, one thread inside a
  // parallel region. That ICV is per thread (the server's engine thread has its own), so it is set here to myriad's
  // thread count, or to one under a ScopedSerialBlas, and put back after.
  const int want = serial_blas_active() || omp_in_parallel() ? 1 : num_threads(), had = omp_get_max_threads();
  if (want != had) omp_set_num_threads(want);
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (want != had) omp_set_num_threads(had);
  MYRIAD_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", int(st), " on ", M, " x ", N, " x ", K);
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta,
      (void)C, (void)ldc;
  MYRIAD_REQUIRE(false, kUnsupported, "gemm: this build has no oneDNN (MYRIAD_ONEDNN is off)");
#endif
}

std::string compute_paths(const std::string& indent) {
  const CpuInfo& cpu = cpu_info();
  std::string s = indent + "cpu:     " + cpu.summary() + "\n";
  s += indent + "kernels: " + kernel_isa_path() + " (myriad's own, as compiled; int8 products: " +
       (cpu.vnni_isa().empty() ? std::string("no VNNI on this CPU") : cpu.vnni_isa()) + ")\n";
  s += indent + "gemm:    " + gemm_backend_summary() + "\n";
  return s;
}

}  // namespace myriad::ops
