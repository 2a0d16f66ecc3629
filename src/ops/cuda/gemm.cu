// GEMM through cuBLAS (64-bit-size API). cuBLAS is column-major; a row-major matrix with row stride ld is the
// column-major transpose with the same ld, so the row-major C = op(A) op(B) is computed as the column-major
// C^T = op(B)^T op(A)^T: swap the operands (and M with N), keep each operand's transpose flag.
// NOTE: TF32 is off unless set_gemm_tf32(true): plain f32 FMA math, so results match the CPU sgemm within f32
// rounding (error bound ~K * 2^-24 of sum |a||b|).
#include <cublas_v2.h>

#include <atomic>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_common.cuh"

namespace myriad::cuda {

namespace {

std::atomic<bool> g_tf32{false};

void check_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  const ErrorKind kind = st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::kOutOfMemory : ErrorKind::kUnsupported;
  throw_error(kind, "cuBLAS: ", call, " failed: ", cublasGetStatusName(st), " (", cublasGetStatusString(st), ") at ",
              file, ":", line);
}
#define MYRIAD_CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

// One handle for the process, on the current device and the legacy default stream, made on first use.
// NOTE: deliberately never destroyed: at exit the CUDA runtime may be unloaded before static destructors run.
// cuBLAS handles are not safe for concurrent calls from several host threads; gemm is called from one.
cublasHandle_t handle() {
  static const cublasHandle_t h = [] {
    cublasHandle_t made = nullptr;
    MYRIAD_CUBLAS_CHECK(cublasCreate(&made));
    return made;
  }();
  return h;
}

// C = beta * C over batch matrices of M x N (row stride ldc, batch stride stride_c): the K == 0 case, where the
// product is empty. beta == 0 writes zeros (BLAS semantics: C's old contents, NaN included, are ignored).
__global__ void scale_matrix_kernel(float* C, float beta, int64_t M, int64_t N, int64_t ldc, int64_t batch,
                                    int64_t stride_c) {
  const int64_t total = batch * M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / (M * N), r = (i / N) % M, c = i % N;
    float& v = C[b * stride_c + r * ldc + c];
    v = beta == 0.0f ? 0.0f : beta * v;
  }
}

}  // namespace

void set_gemm_tf32(bool allow) {
  g_tf32.store(allow);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
          int64_t stride_c) {
  MYRIAD_REQUIRE(M >= 0 && N >= 0 && K >= 0 && batch >= 0, kShape, "cuda::gemm: negative size (M ", M, ", N ", N,
                 ", K ", K, ", batch ", batch, ")");
  if (M == 0 || N == 0 || batch == 0) return;
  MYRIAD_REQUIRE(ldc >= N, kShape, "cuda::gemm: ldc (", ldc, ") must be >= N (", N, ")");
  if (K == 0) {
    scale_matrix_kernel<<<detail::grid_for(batch * M * N), detail::kThreads>>>(C, beta, M, N, ldc, batch, stride_c);
    MYRIAD_CUDA_CHECK_LAUNCH("scale_matrix_kernel");
    return;
  }
  // Row-major leading dimensions: A is M x K (or K x M when ta), B is K x N (or N x K when tb).
  MYRIAD_REQUIRE(lda >= (ta ? M : K), kShape, "cuda::gemm: lda (", lda, ") must be >= ", ta ? "M (" : "K (", ta ? M : K,
                 ")");
  MYRIAD_REQUIRE(ldb >= (tb ? K : N), kShape, "cuda::gemm: ldb (", ldb, ") must be >= ", tb ? "K (" : "N (", tb ? K : N,
                 ")");

  cublasHandle_t h = handle();
  MYRIAD_CUBLAS_CHECK(cublasSetMathMode(h, g_tf32.load() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Column-major: C^T (N x M, ld ldc) = op(B)^T (N x K) * op(A)^T (K x M).
  if (batch == 1) {
    MYRIAD_CUBLAS_CHECK(cublasSgemm_64(h, op_b, op_a, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
  } else {
    MYRIAD_CUBLAS_CHECK(cublasSgemmStridedBatched_64(h, op_b, op_a, N, M, K, &alpha, B, ldb, stride_b, A, lda, stride_a,
                                                     &beta, C, ldc, stride_c, batch));
  }
}

}  // namespace myriad::cuda
