// The dispatch of the kernel table (ops/kernels.h): each ops:: entry runs the kernel of the device it is given.
// The one place where the layers above src/ops meet the backends' kernels.
#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/kernels.h"

namespace myriad::ops {

[[noreturn]] void missing_kernel(const char* op, Device device) {
  throw_error(ErrorKind::kUnsupported, "op '", op, "' has no kernel for device ", device_name(device),
              " (the kernels of each device: src/ops/kernels.h, src/ops/cuda/cuda_backend.h)");
}

void gemm_skinny(Device device, int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y,
                 int64_t ldy) {
  if (device == Device::kCPU) return cpu::gemm_skinny(n, N, K, X, W, Y, ldy);
  missing_kernel("gemm_skinny", device);
}

void gemm_skinny_bf16(Device device, int64_t n, int64_t N, int64_t K, const uint16_t* X, int64_t ldx, const uint16_t* W,
                      int64_t ldw, float* Y, int64_t ldy) {
  if (device == Device::kCPU) return cpu::gemm_skinny_bf16(n, N, K, X, ldx, W, ldw, Y, ldy);
  missing_kernel("gemm_skinny_bf16", device);
}

bool bf16_dot_native(Device device) {
  if (device == Device::kCPU) return cpu::bf16_dot_native();
  return false;  // a capability query: no other device has the instruction
}

void bf16_to_f32_rows(Device device, float* dst, int64_t ldd, const uint16_t* src, int64_t lds, int64_t n, int64_t K) {
  if (device == Device::kCPU) return cpu::bf16_to_f32_rows(dst, ldd, src, lds, n, K);
  missing_kernel("bf16_to_f32_rows", device);
}

void f32_to_bf16_rows(Device device, uint16_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t n, int64_t K) {
  if (device == Device::kCPU) return cpu::f32_to_bf16_rows(dst, ldd, src, lds, n, K);
  missing_kernel("f32_to_bf16_rows", device);
}

void gemm_skinny_nn(Device device, int64_t n, int64_t N, int64_t K, const float* X, int64_t ldx, const float* W,
                    int64_t ldw, float* Y, int64_t ldy, bool accumulate) {
  if (device == Device::kCPU) return cpu::gemm_skinny_nn(n, N, K, X, ldx, W, ldw, Y, ldy, accumulate);
  missing_kernel("gemm_skinny_nn", device);
}

void rank_update(Device device, int64_t M, int64_t N, int64_t n, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* D, int64_t ldd) {
  if (device == Device::kCPU) return cpu::rank_update(M, N, n, A, lda, B, ldb, D, ldd);
  missing_kernel("rank_update", device);
}

void gemm(Device device, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch, int64_t stride_a,
          int64_t stride_b, int64_t stride_c) {
  if (device == Device::kCPU)
    return cpu::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, batch, stride_a, stride_b, stride_c);
  if (device == Device::kCUDA)
    return cuda::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, batch, stride_a, stride_b, stride_c);
  missing_kernel("gemm", device);
}

void unary_forward(Device device, Unary op, float* y, const float* x, int64_t n) {
  if (device == Device::kCPU) return cpu::unary_forward(op, y, x, n);
  if (device == Device::kCUDA) return cuda::unary_forward(op, y, x, n);
  missing_kernel("unary_forward", device);
}

void unary_backward(Device device, Unary op, float* dx, const float* dy, const float* x, int64_t n) {
  if (device == Device::kCPU) return cpu::unary_backward(op, dx, dy, x, n);
  if (device == Device::kCUDA) return cuda::unary_backward(op, dx, dy, x, n);
  missing_kernel("unary_backward", device);
}

void binary_forward(Device device, Binary op, float* out, const float* a, const int64_t* a_strides, const float* b,
                    const int64_t* b_strides, const int64_t* shape, int ndim) {
  if (device == Device::kCPU) return cpu::binary_forward(op, out, a, a_strides, b, b_strides, shape, ndim);
  if (device == Device::kCUDA) return cuda::binary_forward(op, out, a, a_strides, b, b_strides, shape, ndim);
  missing_kernel("binary_forward", device);
}

void scale(Device device, float* y, const float* x, float alpha, int64_t n) {
  if (device == Device::kCPU) return cpu::scale(y, x, alpha, n);
  if (device == Device::kCUDA) return cuda::scale(y, x, alpha, n);
  missing_kernel("scale", device);
}

void axpy(Device device, float* y, const float* x, float alpha, int64_t n) {
  if (device == Device::kCPU) return cpu::axpy(y, x, alpha, n);
  if (device == Device::kCUDA) return cuda::axpy(y, x, alpha, n);
  missing_kernel("axpy", device);
}

void broadcast_reduce_accumulate(Device device, float* g, const int64_t* g_strides, const float* d,
                                 const int64_t* shape, int ndim) {
  if (device == Device::kCPU) return cpu::broadcast_reduce_accumulate(g, g_strides, d, shape, ndim);
  missing_kernel("broadcast_reduce_accumulate", device);
}

void copy_rows(Device device, float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols,
               bool accumulate) {
  if (device == Device::kCPU) return cpu::copy_rows(dst, ldd, src, lds, rows, cols, accumulate);
  missing_kernel("copy_rows", device);
}

void rmsnorm_forward(Device device, float* y, float* rstd, const float* x, const float* w, const float* g, int64_t rows,
                     int64_t N, float eps) {
  if (device == Device::kCPU) return cpu::rmsnorm_forward(y, rstd, x, w, g, rows, N, eps);
  if (device == Device::kCUDA) return cuda::rmsnorm_forward(y, rstd, x, w, g, rows, N, eps);
  missing_kernel("rmsnorm_forward", device);
}

void rmsnorm_backward(Device device, float* dx, float* dw, float* dg, const float* dy, const float* x, const float* w,
                      const float* g, const float* rstd, int64_t rows, int64_t N) {
  if (device == Device::kCPU) return cpu::rmsnorm_backward(dx, dw, dg, dy, x, w, g, rstd, rows, N);
  if (device == Device::kCUDA) return cuda::rmsnorm_backward(dx, dw, dg, dy, x, w, g, rstd, rows, N);
  missing_kernel("rmsnorm_backward", device);
}

void attn_res_read_forward(Device device, float* out, float* p, float* r, const float* const* v, int64_t C,
                           int64_t rows, int64_t N, const float* u, float eps) {
  if (device == Device::kCPU) return cpu::attn_res_read_forward(out, p, r, v, C, rows, N, u, eps);
  missing_kernel("attn_res_read_forward", device);
}

void attn_res_read_backward(Device device, float* const* dv, float* du, const float* dout, const float* const* v,
                            const float* p, const float* r, int64_t C, int64_t rows, int64_t N, const float* u) {
  if (device == Device::kCPU) return cpu::attn_res_read_backward(dv, du, dout, v, p, r, C, rows, N, u);
  missing_kernel("attn_res_read_backward", device);
}

void l2norm_forward(Device device, float* y, float* rnorm, const float* x, int64_t rows, int64_t N, float eps) {
  if (device == Device::kCPU) return cpu::l2norm_forward(y, rnorm, x, rows, N, eps);
  missing_kernel("l2norm_forward", device);
}

void l2norm_backward(Device device, float* dx, const float* dy, const float* y, const float* rnorm, int64_t rows,
                     int64_t N) {
  if (device == Device::kCPU) return cpu::l2norm_backward(dx, dy, y, rnorm, rows, N);
  missing_kernel("l2norm_backward", device);
}

void situ_glu_forward(Device device, float* y, int64_t ldy, const float* g, int64_t ldg, const float* u, int64_t ldu,
                      int64_t rows, int64_t F, SituParams p) {
  if (device == Device::kCPU) return cpu::situ_glu_forward(y, ldy, g, ldg, u, ldu, rows, F, p);
  if (device == Device::kCUDA) return cuda::situ_glu_forward(y, ldy, g, ldg, u, ldu, rows, F, p);
  missing_kernel("situ_glu_forward", device);
}

void situ_glu_backward(Device device, float* dg, int64_t lddg, float* du, int64_t lddu, const float* dy, int64_t lddy,
                       const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t rows, int64_t F,
                       SituParams p) {
  if (device == Device::kCPU) return cpu::situ_glu_backward(dg, lddg, du, lddu, dy, lddy, g, ldg, u, ldu, rows, F, p);
  if (device == Device::kCUDA) return cuda::situ_glu_backward(dg, lddg, du, lddu, dy, lddy, g, ldg, u, ldu, rows, F, p);
  missing_kernel("situ_glu_backward", device);
}

float max_of(Device device, const float* x, int64_t n) {
  if (device == Device::kCPU) return cpu::max_of(x, n);
  missing_kernel("max_of", device);
}

float exp_shifted_sum(Device device, float* x, int64_t n, float shift) {
  if (device == Device::kCPU) return cpu::exp_shifted_sum(x, n, shift);
  missing_kernel("exp_shifted_sum", device);
}

void softmax_forward(Device device, float* y, const float* x, int64_t rows, int64_t N) {
  if (device == Device::kCPU) return cpu::softmax_forward(y, x, rows, N);
  if (device == Device::kCUDA) return cuda::softmax_forward(y, x, rows, N);
  missing_kernel("softmax_forward", device);
}

void softmax_backward(Device device, float* dx, const float* dy, const float* y, int64_t rows, int64_t N) {
  if (device == Device::kCPU) return cpu::softmax_backward(dx, dy, y, rows, N);
  if (device == Device::kCUDA) return cuda::softmax_backward(dx, dy, y, rows, N);
  missing_kernel("softmax_backward", device);
}

void log_softmax_forward(Device device, float* y, const float* x, int64_t rows, int64_t N) {
  if (device == Device::kCPU) return cpu::log_softmax_forward(y, x, rows, N);
  missing_kernel("log_softmax_forward", device);
}

void log_softmax_backward(Device device, float* dx, const float* dy, const float* y, int64_t rows, int64_t N) {
  if (device == Device::kCPU) return cpu::log_softmax_backward(dx, dy, y, rows, N);
  missing_kernel("log_softmax_backward", device);
}

void conv1d_forward(Device device, float* y, float* state_out, const float* x, const float* w, const float* state_in,
                    int64_t B, int64_t T, int64_t C, int64_t W) {
  if (device == Device::kCPU) return cpu::conv1d_forward(y, state_out, x, w, state_in, B, T, C, W);
  missing_kernel("conv1d_forward", device);
}

void conv1d_backward(Device device, float* dx, float* dw, float* dstate_in, const float* dy, const float* x,
                     const float* w, const float* state_in, int64_t B, int64_t T, int64_t C, int64_t W) {
  if (device == Device::kCPU) return cpu::conv1d_backward(dx, dw, dstate_in, dy, x, w, state_in, B, T, C, W);
  missing_kernel("conv1d_backward", device);
}

void rope_forward(Device device, float* y, const float* x, const float* cos, const float* sin, int64_t T, int64_t heads,
                  int64_t N, RopeLayout layout) {
  if (device == Device::kCPU) return cpu::rope_forward(y, x, cos, sin, T, heads, N, layout);
  missing_kernel("rope_forward", device);
}

void rope_backward(Device device, float* dx, const float* dy, const float* cos, const float* sin, int64_t T,
                   int64_t heads, int64_t N, RopeLayout layout) {
  if (device == Device::kCPU) return cpu::rope_backward(dx, dy, cos, sin, T, heads, N, layout);
  missing_kernel("rope_backward", device);
}

void attention_forward(Device device, float* out, float* lse, const float* q, const float* k, const float* v,
                       AttentionShape s) {
  if (device == Device::kCPU) return cpu::attention_forward(out, lse, q, k, v, s);
  missing_kernel("attention_forward", device);
}

void attention_backward(Device device, float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, AttentionShape s) {
  if (device == Device::kCPU) return cpu::attention_backward(dq, dk, dv, dout, out, lse, q, k, v, s);
  missing_kernel("attention_backward", device);
}

void sparse_attention_forward(Device device, float* out, float* lse, const float* q, const float* k, const float* v,
                              const int32_t* blocks, SparseAttentionShape s) {
  if (device == Device::kCPU) return cpu::sparse_attention_forward(out, lse, q, k, v, blocks, s);
  missing_kernel("sparse_attention_forward", device);
}

void sparse_attention_backward(Device device, float* dq, float* dk, float* dv, const float* dout, const float* out,
                               const float* lse, const float* q, const float* k, const float* v, const int32_t* blocks,
                               SparseAttentionShape s) {
  if (device == Device::kCPU) return cpu::sparse_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, blocks, s);
  missing_kernel("sparse_attention_backward", device);
}

int64_t cross_entropy_forward(Device device, float* loss, float* lse, const float* h, const float* W,
                              const int64_t* targets, int64_t T, int64_t D, int64_t V, int64_t ignore_index,
                              const float* weights, float* nll) {
  if (device == Device::kCPU)
    return cpu::cross_entropy_forward(loss, lse, h, W, targets, T, D, V, ignore_index, weights, nll);
  missing_kernel("cross_entropy_forward", device);
}

void cross_entropy_backward(Device device, float* dh, float* dW, float dloss, const float* h, const float* W,
                            const int64_t* targets, const float* lse, int64_t T, int64_t D, int64_t V,
                            int64_t ignore_index, const float* weights) {
  if (device == Device::kCPU)
    return cpu::cross_entropy_backward(dh, dW, dloss, h, W, targets, lse, T, D, V, ignore_index, weights);
  missing_kernel("cross_entropy_backward", device);
}

void topk(Device device, int32_t* idx, float* val, const float* x, int64_t rows, int64_t N, int64_t k) {
  if (device == Device::kCPU) return cpu::topk(idx, val, x, rows, N, k);
  missing_kernel("topk", device);
}

void route_weights_forward(Device device, float* p, float* denom, const float* s, const int32_t* idx, int64_t T,
                           int64_t E, int64_t k, float scale, bool renormalize) {
  if (device == Device::kCPU) return cpu::route_weights_forward(p, denom, s, idx, T, E, k, scale, renormalize);
  missing_kernel("route_weights_forward", device);
}

void gather_rows(Device device, float* out, const float* src, const int32_t* idx, int64_t n, int64_t src_rows,
                 int64_t N) {
  if (device == Device::kCPU) return cpu::gather_rows(out, src, idx, n, src_rows, N);
  missing_kernel("gather_rows", device);
}

void scatter_add_rows(Device device, float* dst, const float* src, const int32_t* idx, const float* w, int64_t n,
                      int64_t dst_rows, int64_t N) {
  if (device == Device::kCPU) return cpu::scatter_add_rows(dst, src, idx, w, n, dst_rows, N);
  missing_kernel("scatter_add_rows", device);
}

void scatter_add_rows_backward(Device device, float* dsrc, float* dw, const float* ddst, const float* src,
                               const int32_t* idx, const float* w, int64_t n, int64_t dst_rows, int64_t N) {
  if (device == Device::kCPU) return cpu::scatter_add_rows_backward(dsrc, dw, ddst, src, idx, w, n, dst_rows, N);
  missing_kernel("scatter_add_rows_backward", device);
}

void embedding_forward(Device device, float* out, const float* table, const int64_t* ids, int64_t T, int64_t V,
                       int64_t D) {
  if (device == Device::kCPU) return cpu::embedding_forward(out, table, ids, T, V, D);
  missing_kernel("embedding_forward", device);
}

void embedding_backward(Device device, float* dtable, const float* dout, const int64_t* ids, int64_t T, int64_t V,
                        int64_t D) {
  if (device == Device::kCPU) return cpu::embedding_backward(dtable, dout, ids, T, V, D);
  missing_kernel("embedding_backward", device);
}

void glu_forward(Device device, GluParams p, float* y, const float* g, const float* u, int64_t rows, int64_t F) {
  if (device == Device::kCPU) return cpu::glu_forward(p, y, g, u, rows, F);
  missing_kernel("glu_forward", device);
}

void grouped_glu_forward(Device device, GroupedGluShape s, const int64_t* off, const float* z, const float* const* w1,
                         const float* const* w3, const float* const* w2, GluParams glu, float* y, float* g, float* u) {
  if (device == Device::kCPU) return cpu::grouped_glu_forward(s, off, z, w1, w3, w2, glu, y, g, u);
  missing_kernel("grouped_glu_forward", device);
}

void grouped_glu_backward(Device device, GroupedGluShape s, const int64_t* off, const float* dy, const float* z,
                          const float* const* w1, const float* const* w3, const float* const* w2, const float* g,
                          const float* u, GluParams glu, float* dz, float* const* dw1, float* const* dw3,
                          float* const* dw2) {
  if (device == Device::kCPU) return cpu::grouped_glu_backward(s, off, dy, z, w1, w3, w2, g, u, glu, dz, dw1, dw3, dw2);
  missing_kernel("grouped_glu_backward", device);
}

void adamw_update(Device device, float* p, const float* g, float* m, float* v, int64_t n, AdamWParams hp) {
  if (device == Device::kCPU) return cpu::adamw_update(p, g, m, v, n, hp);
  missing_kernel("adamw_update", device);
}

void kda_gate_forward(Device device, float* g, const float* f, const float* A_log, const float* dt_bias, int64_t T,
                      int64_t H, int64_t K, float lower_bound) {
  if (device == Device::kCPU) return cpu::kda_gate_forward(g, f, A_log, dt_bias, T, H, K, lower_bound);
  missing_kernel("kda_gate_forward", device);
}

void kda_gate_backward(Device device, float* df, float* dA_log, float* ddt_bias, const float* dg, const float* f,
                       const float* A_log, const float* dt_bias, int64_t T, int64_t H, int64_t K, float lower_bound) {
  if (device == Device::kCPU)
    return cpu::kda_gate_backward(df, dA_log, ddt_bias, dg, f, A_log, dt_bias, T, H, K, lower_bound);
  missing_kernel("kda_gate_backward", device);
}

void kda_recurrent_forward(Device device, float* o, float* S_out, const float* q, const float* k, const float* v,
                           const float* g, const float* beta, const float* S0, KdaShape s) {
  if (device == Device::kCPU) return cpu::kda_recurrent_forward(o, S_out, q, k, v, g, beta, S0, s);
  missing_kernel("kda_recurrent_forward", device);
}

void kda_chunk_forward(Device device, float* o, float* S_out, const float* q, const float* k, const float* v,
                       const float* g, const float* beta, const float* S0, KdaShape s) {
  if (device == Device::kCPU) return cpu::kda_chunk_forward(o, S_out, q, k, v, g, beta, S0, s);
  missing_kernel("kda_chunk_forward", device);
}

void kda_backward(Device device, float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0,
                  const float* dout, const float* dS_out, const float* q, const float* k, const float* v,
                  const float* g, const float* beta, const float* S0, KdaShape s) {
  if (device == Device::kCPU)
    return cpu::kda_backward(dq, dk, dv, dg, dbeta, dS0, dout, dS_out, q, k, v, g, beta, S0, s);
  missing_kernel("kda_backward", device);
}

void kda_recurrent_backward(Device device, float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0,
                            const float* dout, const float* dS_out, const float* q, const float* k, const float* v,
                            const float* g, const float* beta, const float* S0, KdaShape s) {
  if (device == Device::kCPU)
    return cpu::kda_recurrent_backward(dq, dk, dv, dg, dbeta, dS0, dout, dS_out, q, k, v, g, beta, S0, s);
  missing_kernel("kda_recurrent_backward", device);
}

namespace {
std::atomic<int> g_kda_form{-1};  // -1: not chosen yet
}  // namespace

KdaForm kda_sequence_form(Device device) {
  (void)device;  // the same form on every device today (see kernels.h)
  int f = g_kda_form.load(std::memory_order_relaxed);
  if (f < 0) {
    const char* env = std::getenv("MYRIAD_KDA_FORM");
    const std::string want = env && *env ? env : "chunk";
    MYRIAD_REQUIRE(want == "chunk" || want == "recurrent", kValue, "MYRIAD_KDA_FORM=", want,
                   ": must be chunk or recurrent");
    int expected = -1;
    g_kda_form.compare_exchange_strong(expected, want == "chunk" ? 0 : 1);
    f = g_kda_form.load();
  }
  return f == 0 ? KdaForm::kChunk : KdaForm::kRecurrent;
}

void set_kda_sequence_form(KdaForm form) {
  g_kda_form.store(form == KdaForm::kChunk ? 0 : 1);
}

const char* kda_form_name(KdaForm form) {
  return form == KdaForm::kChunk ? "chunkwise" : "recurrent";
}

void kda_sequence_forward(Device device, KdaForm form, float* o, float* S_out, const float* q, const float* k,
                          const float* v, const float* g, const float* beta, const float* S0, KdaShape s) {
  (form == KdaForm::kChunk ? kda_chunk_forward : kda_recurrent_forward)(device, o, S_out, q, k, v, g, beta, S0, s);
}

void kda_sequence_backward(Device device, KdaForm form, float* dq, float* dk, float* dv, float* dg, float* dbeta,
                           float* dS0, const float* dout, const float* dS_out, const float* q, const float* k,
                           const float* v, const float* g, const float* beta, const float* S0, KdaShape s) {
  (form == KdaForm::kChunk ? kda_backward : kda_recurrent_backward)(device, dq, dk, dv, dg, dbeta, dS0, dout, dS_out, q,
                                                                    k, v, g, beta, S0, s);
}

double sum_all(Device device, const float* x, int64_t n) {
  if (device == Device::kCPU) return cpu::sum_all(x, n);
  missing_kernel("sum_all", device);
}

void sum_rows_accumulate(Device device, float* out, const float* x, int64_t rows, int64_t N) {
  if (device == Device::kCPU) return cpu::sum_rows_accumulate(out, x, rows, N);
  missing_kernel("sum_rows_accumulate", device);
}

}  // namespace myriad::ops
