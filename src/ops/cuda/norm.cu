// RMSNorm forward / backward, with the optional per-element gate g (KDA's gated output norm).
//   forward:  rstd = 1 / sqrt(sum_j x_j^2 / N + eps);  y_j = x_j rstd w_j (sigmoid(g_j) when g).
//   backward: with gate s_j (1 without g) and dot = sum_j dy_j s_j w_j x_j,
//             dx_j += rstd (dy_j s_j w_j - x_j rstd^2 dot / N)
//             dg_j += dy_j x_j rstd w_j s_j (1 - s_j)
//             dw_j += sum_rows dy_j s_j x_j rstd
// One block per row (f32 sums by warp shuffles, then across warps). dw is a column sum over all rows, done in
// two stages without atomics, so it is deterministic: partial sums over chunks of rows into a [P, N] scratch
// (stream-ordered cudaMallocAsync), then one pass adding the P partials into dw.
// Shape legend: rows the leading axes flattened, N row length, P row chunks.
#include <algorithm>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_common.cuh"

namespace myriad::cuda {

namespace {

using detail::block_sum;
using detail::sigmoidf;

__global__ void rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* w, const float* g,
                                       int64_t rows, int64_t N, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x_N = x + r * N;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) ss += x_N[j] * x_N[j];
    ss = block_sum(ss);
    // N == 0 with rows > 0 still writes rstd = 1/sqrt(eps), as the reference does.
    const float rs = 1.0f / sqrtf(ss / float(N > 0 ? N : 1) + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    float* y_N = y + r * N;
    const float* g_N = g ? g + r * N : nullptr;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) y_N[j] = x_N[j] * rs * w[j] * (g_N ? sigmoidf(g_N[j]) : 1.0f);
  }
}

// dx and dg (per row; either may be null: not wanted); dw is left to the column kernels below.
__global__ void rmsnorm_backward_rows_kernel(float* dx, float* dg, const float* dy, const float* x, const float* w,
                                             const float* g, const float* rstd, int64_t rows, int64_t N) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * N;
    const float rs = rstd[r];
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      const float gate = g ? sigmoidf(g[base + j]) : 1.0f;
      dot += dy[base + j] * gate * w[j] * x[base + j];
    }
    dot = block_sum(dot);
    const float c = rs * rs * dot / float(N);
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      const int64_t i = base + j;
      const float gate = g ? sigmoidf(g[i]) : 1.0f;
      if (dg) dg[i] += dy[i] * x[i] * rs * w[j] * gate * (1.0f - gate);
      if (dx) dx[i] += rs * (dy[i] * gate * w[j] - x[i] * c);
    }
  }
}

// Stage 1 of dw. Block (32, kRowLanes): threadIdx.x walks 32 adjacent columns (coalesced), threadIdx.y the rows of
// chunk blockIdx.y. out[p, j] = sum over the chunk's rows (accumulate: out[p, j] += that instead; used when P = 1
// and out is dw itself).
constexpr int kRowLanes = 8;
__global__ void rmsnorm_dw_partial_kernel(float* out, bool accumulate, const float* dy, const float* x, const float* g,
                                          const float* rstd, int64_t rows, int64_t N, int64_t rows_per_chunk) {
  __shared__ float tile[kRowLanes][33];  // +1 column: no bank conflicts on the transposed read
  const int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t p = blockIdx.y;
  const int64_t r0 = p * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float acc = 0.0f;
  if (j < N) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const int64_t i = r * N + j;
      const float gate = g ? sigmoidf(g[i]) : 1.0f;
      acc += dy[i] * gate * x[i] * rstd[r];
    }
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < N) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowLanes; ++k) s += tile[k][threadIdx.x];
    float& o = out[p * N + j];
    o = accumulate ? o + s : s;
  }
}

// Stage 2 of dw: dw[j] += sum_p partial[p, j] (fixed order: deterministic).
__global__ void rmsnorm_dw_final_kernel(float* dw, const float* partial, int64_t P, int64_t N) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < N; j += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t p = 0; p < P; ++p) s += partial[p * N + j];
    dw[j] += s;
  }
}

}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, const float* g, int64_t rows, int64_t N,
                     float eps) {
  if (rows <= 0 || N < 0) return;
  rmsnorm_forward_kernel<<<detail::row_grid(rows), detail::row_threads(N)>>>(y, rstd, x, w, g, rows, N, eps);
  MYRIAD_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

void rmsnorm_backward(float* dx, float* dw, float* dg, const float* dy, const float* x, const float* w, const float* g,
                      const float* rstd, int64_t rows, int64_t N) {
  if (rows <= 0 || N <= 0) return;
  rmsnorm_backward_rows_kernel<<<detail::row_grid(rows), detail::row_threads(N)>>>(dx, g ? dg : nullptr, dy, x, w, g,
                                                                                   rstd, rows, N);
  MYRIAD_CUDA_CHECK_LAUNCH("rmsnorm_backward_rows_kernel");
  if (!dw) return;

  // dw: P chunks of rows, enough blocks (column tiles x chunks ~ 1024) to fill the device, at most 512 chunks.
  const int64_t col_tiles = (N + 31) / 32;
  MYRIAD_REQUIRE(col_tiles <= 0x7fffffff, kUnsupported, "cuda::rmsnorm_backward: N = ", N, " is too wide");
  int64_t P = std::min<int64_t>({(rows + kRowLanes - 1) / kRowLanes, std::max<int64_t>(1, 1024 / col_tiles), 512});
  P = std::max<int64_t>(P, 1);
  const int64_t rows_per_chunk = (rows + P - 1) / P;
  P = (rows + rows_per_chunk - 1) / rows_per_chunk;
  const dim3 block{32, kRowLanes};
  const dim3 grid{unsigned(col_tiles), unsigned(P)};
  if (P == 1) {
    rmsnorm_dw_partial_kernel<<<grid, block>>>(dw, true, dy, x, g, rstd, rows, N, rows_per_chunk);
    MYRIAD_CUDA_CHECK_LAUNCH("rmsnorm_dw_partial_kernel");
    return;
  }
  float* partial = nullptr;
  MYRIAD_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), size_t(P * N) * sizeof(float), 0));
  rmsnorm_dw_partial_kernel<<<grid, block>>>(partial, false, dy, x, g, rstd, rows, N, rows_per_chunk);
  const cudaError_t launch = cudaGetLastError();
  if (launch == cudaSuccess) rmsnorm_dw_final_kernel<<<detail::grid_for(N), detail::kThreads>>>(dw, partial, P, N);
  const cudaError_t launch2 = launch == cudaSuccess ? cudaGetLastError() : launch;
  MYRIAD_CUDA_CHECK(cudaFreeAsync(partial, 0));  // stream-ordered: freed after the kernels that use it
  detail::check_cuda(launch2, "launch of rmsnorm_dw_partial_kernel / rmsnorm_dw_final_kernel", __FILE__, __LINE__);
}

}  // namespace myriad::cuda
