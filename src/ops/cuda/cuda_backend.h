// The CUDA backend seam: device discovery, the device allocator, and the device kernels that mirror the
// cpu:: entries of the kernel table (ops/kernels.h) over DEVICE pointers.
//  - Plain C++: this header is included from .cc files in every build. Without MYRIAD_CUDA the symbols come
//    from cuda_stub.cc, where available() is false and everything else throws kUnsupported.
//  - Every pointer argument of a kernel below is a device pointer (Tensor::raw_data() of a Device::kCUDA
//    tensor). Semantics are exactly those of the cpu:: function of the same name documented in kernels.h:
//    forward kernels overwrite, backward kernels ACCUMULATE (+=), any size may be 0, "ld" are row strides.
//  - Kernels are asynchronous: they are queued on the legacy default stream, in order with each other and with
//    the allocator's copies (cudaMemcpy to/from the host waits for them). synchronize() waits for all work
//    and reports any asynchronous fault as an Error.
//  - Errors: every CUDA / cuBLAS return code is checked; a failure throws myriad::Error naming the call
//    (kOutOfMemory for allocation failures, kUnsupported otherwise).
// Left out for now: multiple devices (everything runs on the current device, device 0 unless the caller sets
// another before init()), streams other than the default one, bf16/f16 compute, the remaining kernel-table
// entries (attention, conv1d, rope, cross-entropy, top-k, gather/scatter, embedding, AdamW, l2norm,
// log-softmax, reductions).
#pragma once

#include <cstdint>

#include "ops/kernels.h"

namespace myriad::cuda {

// True when the backend is compiled in AND a CUDA device is usable (driver present, at least one device).
// Cheap after the first call (cached); never throws.
bool available();

// Registers the CUDA DeviceAllocator with core, so Tensor::empty/zeros/to(Device::kCUDA) work. Idempotent and
// thread-safe. Throws Error(kUnsupported) with the reason when !available().
void init();

// Waits for all queued device work; throws Error(kUnsupported) naming the fault if any kernel failed.
void synchronize();

// TF32 tensor-core math in gemm (about 10 mantissa bits per product). OFF by default, so gemm matches the f32
// CPU kernel within f32 rounding; turn on only where the precision loss is acceptable.
void set_gemm_tf32(bool allow);

// C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b]; row-major, op = transpose when ta / tb; A is M x K after op,
// B is K x N. cuBLAS (strided-batched when batch > 1). As in BLAS, beta == 0 ignores C's old contents (NaN too).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch = 1, int64_t stride_a = 0, int64_t stride_b = 0,
          int64_t stride_c = 0);

// Activations (SiLU, sigmoid, tanh, softplus); backward accumulates dx += dy * f'(x).
void unary_forward(Unary op, float* y, const float* x, int64_t n);
void unary_backward(Unary op, float* dx, const float* dy, const float* x, int64_t n);

// out[i] = a[i] op b[i] over a broadcast shape (out contiguous); a_strides/b_strides hold 0 on broadcast axes.
// The shape / stride arrays are HOST pointers. At most 8 axes after size-1 axes are dropped and axes that are
// contiguous in both inputs are merged; more throws Error(kUnsupported).
void binary_forward(Binary op, float* out, const float* a, const int64_t* a_strides, const float* b,
                    const int64_t* b_strides, const int64_t* shape, int ndim);
void scale(float* y, const float* x, float alpha, int64_t n);  // y = alpha * x (y may be x)
void axpy(float* y, const float* x, float alpha, int64_t n);   // y += alpha * x

// RMSNorm over rows of N: y = x * rstd * w (* sigmoid(g) when g != null; g, dg are [rows, N], w is [N]).
// rstd [rows] is saved for backward. Backward: dx, dg accumulate per element; dw accumulates the sum over rows
// (two-stage, deterministic: no atomics).
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, const float* g, int64_t rows, int64_t N,
                     float eps);
void rmsnorm_backward(float* dx, float* dw, float* dg, const float* dy, const float* x, const float* w, const float* g,
                      const float* rstd, int64_t rows, int64_t N);

// SiTU-GLU over [rows, F]: y = [b1 tanh(g/b1) sigmoid(g)] * [b2 tanh(u/b2)]; rows at strides ld*.
void situ_glu_forward(float* y, int64_t ldy, const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t rows,
                      int64_t F, SituParams p);
void situ_glu_backward(float* dg, int64_t lddg, float* du, int64_t lddu, const float* dy, int64_t lddy, const float* g,
                       int64_t ldg, const float* u, int64_t ldu, int64_t rows, int64_t F, SituParams p);

// Softmax over rows of N; backward accumulates dx += y * (dy - <dy, y>).
void softmax_forward(float* y, const float* x, int64_t rows, int64_t N);
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t N);

}  // namespace myriad::cuda
