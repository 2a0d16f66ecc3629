// GEMM through OpenBLAS (the machine's sgemm ceiling is what every other kernel is measured against).
#include <cblas.h>

#include "ops/cpu/parallel.h"
#include "ops/kernels.h"

namespace myriad::cpu {

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
          int64_t stride_c) {
  if (M == 0 || N == 0 || batch == 0) return;
  for (int64_t b = 0; b < batch; ++b) {
    float* c = C + b * stride_c;
    if (K == 0) {  // BLAS may reject K = 0 leading dimensions; the product is empty: C = beta * C
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      continue;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                alpha, A + b * stride_a, int(lda), B + b * stride_b, int(ldb), beta, c, int(ldc));
  }
}

}  // namespace myriad::cpu
