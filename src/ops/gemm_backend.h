// Which library runs the CPU's general matrix products (ops::gemm, the dequantize-then-multiply path of the
// block formats), chosen once per process in this one place, and what it runs on this CPU.
//
// Candidates (Debian's packages): oneDNN's sgemm, whose JIT kernels are picked by the CPU's instruction sets
// (CPUID feature bits), and OpenBLAS, whose DYNAMIC_ARCH build picks kernels by the CPU's model number, and so
// runs its generic SSE kernels ("Prescott") on a CPU newer than the library (Debian 12's 0.3.21 on a Sapphire
// Rapids Xeon: a fifth of the machine). Measured on myriad's shapes (`myriad bench ops`, section "GEMM
// backends"; docs/performance.md), oneDNN is the choice where it is built in.
//
// MYRIAD_GEMM=auto (default) | onednn | openblas overrides the choice. OpenBLAS is never used silently with a
// generic kernel on a CPU with AVX2 or AVX-512: choosing it prints one warning naming its kernel, the CPU's ISA
// and the fix (OPENBLAS_CORETYPE).
#pragma once

#include <cstdint>
#include <string>

#include "core/cpu_info.h"

namespace myriad::ops {

enum class GemmLibrary { kOneDnn, kOpenBlas };

struct GemmBackend {
  GemmLibrary library = GemmLibrary::kOpenBlas;
  // With oneDNN chosen, where OpenBLAS's kernel fits the CPU, two kinds of product go to OpenBLAS, as measured on
  // a Sapphire Rapids Xeon (2 threads, `myriad bench ops`): the small ones but for B transposed (a KDA chunk's
  // 64 x 64 x 64 A V: 172 GFLOP/s in oneDNN against 230 in OpenBLAS; K^T V 168 against 232), and those with A
  // transposed and a large output (the weight gradients dY^T X: 1536 x 512 x 1024 at 316 against 355, the
  // lm_head's 16384 x 512 x 1024 at 266 against 336). oneDNN leads on the rest (A^T at 512 x 512 x 1024 411
  // against 365, at 256 x 256 x 64 388 against 196; a 64-row expert product 339 against 238, a decode batch of 4
  // rows 59 against 30, the forward products by 5-15%).
  bool route_to_openblas = false;
  std::string name;    // "oneDNN 2.6.3", "OpenBLAS 0.3.21"
  std::string kernel;  // the kernel path it runs here: "avx512_core_amx JIT", "SkylakeX", "Prescott (generic)"
  std::string why;     // how it was chosen
};

const GemmBackend& gemm_backend();  // chosen at first use

constexpr int64_t kSmallProductMacs = int64_t(1) << 18;        // M N K at or below: OpenBLAS (unless B^T only)
constexpr int64_t kLargeTransposedOutputs = int64_t(1) << 19;  // M N at or above, with A^T: OpenBLAS
// The library that runs one product C [M, N] = op(A) op(B) (ta, tb: A, B transposed).
GemmLibrary gemm_library_for(bool ta, bool tb, int64_t M, int64_t N, int64_t K);
std::string gemm_backend_summary();  // "oneDNN 2.6.3 (avx512_core_amx JIT kernels; auto: ...)"

// C = alpha op(A) op(B) + beta C (row-major) run by the named library: the one place either library is called
// (ops::gemm routes each product here; `myriad bench ops` times the candidates side by side). Threads: myriad's
// count, one under a ScopedSerialBlas or inside a parallel region. kOneDnn without oneDNN built in throws
// kUnsupported.
void gemm_on(GemmLibrary library, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
             int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Three lines, each starting with `indent`: the CPU and its ISA, the ISA path of myriad's own kernels (and of its
// int8 products), and the GEMM backend with its kernel path. For `myriad version`, `selfcheck` and every bench.
std::string compute_paths(const std::string& indent);

// OpenBLAS's own name of the kernel it runs ("SkylakeX", "Haswell", "Prescott"), and whether that is a generic
// one for this CPU (no AVX2 kernel on a CPU with AVX2, no AVX-512 kernel on one with AVX-512).
std::string openblas_kernel();
bool openblas_kernel_is_generic();
// The rule itself, for any kernel name and CPU (case-insensitive names).
bool openblas_kernel_is_generic_for(const std::string& kernel, const CpuInfo& cpu);
// The OPENBLAS_CORETYPE that would give this CPU's ISA its kernels ("SkylakeX", "Haswell"), or "".
std::string openblas_coretype_for_cpu();
std::string openblas_coretype_for(const CpuInfo& cpu);

// Whether oneDNN is compiled in (MYRIAD_ONEDNN; off in the clang presets, whose OpenMP runtime is not oneDNN's).
bool onednn_available();

}  // namespace myriad::ops
