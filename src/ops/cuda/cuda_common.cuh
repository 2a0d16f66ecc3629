// Internal to the CUDA backend (.cu files only): error checking, launch geometry, f32 warp/block reductions,
// and the pointwise maths shared by several kernels.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace myriad::cuda::detail {

// Throws Error naming the call: kOutOfMemory for cudaErrorMemoryAllocation, kUnsupported otherwise.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

inline void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) [[unlikely]]
    throw_cuda_error(err, call, file, line);
}

// Threads per block of the elementwise kernels, and a cap on their grid: grid-stride loops cover the rest.
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  return unsigned(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

// One block per row (grid-stride over rows); the block size grows with the row length up to 256.
inline unsigned row_grid(int64_t rows) {
  return unsigned(std::clamp<int64_t>(rows, 1, kMaxBlocks));
}
inline int row_threads(int64_t N) {
  int t = 32;
  while (t < 256 && t < N) t *= 2;
  return t;
}

// f32 reductions. warp_*: all 32 lanes get the result. block_*: blockDim.x must be a multiple of 32 (at most
// 1024) and every thread of the block must call it; all of them get the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < nwarps ? partial[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < nwarps ? partial[lane] : -CUDART_INF_F);
}

// NOTE: accurate expf (not __expf): the backend must agree with the f32 CPU kernels to ~1e-6 relative.
__device__ __forceinline__ float sigmoidf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

}  // namespace myriad::cuda::detail

#define MYRIAD_CUDA_CHECK(call) ::myriad::cuda::detail::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: reports a bad launch configuration (asynchronous faults surface later, at the next
// synchronising call, e.g. synchronize() or a copy to the host).
#define MYRIAD_CUDA_CHECK_LAUNCH(kernel) \
  ::myriad::cuda::detail::check_cuda(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
