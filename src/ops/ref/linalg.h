// Reference GEMM: the oracle for cpu::gemm and cuda::gemm. Naive triple loop; T = float or double.
#pragma once

#include <cstdint>

namespace myriad::ref {

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
          T beta, T* C, int64_t ldc, int64_t batch = 1, int64_t stride_a = 0, int64_t stride_b = 0,
          int64_t stride_c = 0) {
  for (int64_t b = 0; b < batch; ++b) {
    const T* a = A + b * stride_a;
    const T* bb = B + b * stride_b;
    T* c = C + b * stride_c;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        T acc = 0;
        for (int64_t p = 0; p < K; ++p)
          acc += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? bb[j * ldb + p] : bb[p * ldb + j]);
        c[i * ldc + j] = alpha * acc + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
      }
  }
}

}  // namespace myriad::ref
