// The CPU kernels of the kernel table: the semantics, shapes and conventions of each are documented at its
// ops:: entry point in ops/kernels.h or ops/block_quant.h (same name, without the device argument). Included only
// inside src/ops.
#pragma once

#include <cstdint>
#include <span>

#include "ops/block_quant.h"
#include "ops/kernels.h"

namespace myriad::cpu {

void gemm_skinny(int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y, int64_t ldy);
void gemm_skinny_bf16(int64_t n, int64_t N, int64_t K, const uint16_t* X, int64_t ldx, const uint16_t* W, int64_t ldw,
                      float* Y, int64_t ldy);
bool bf16_dot_native();
void bf16_to_f32_rows(float* dst, int64_t ldd, const uint16_t* src, int64_t lds, int64_t n, int64_t K);
void f32_to_bf16_rows(uint16_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t n, int64_t K);
void gemm_skinny_nn(int64_t n, int64_t N, int64_t K, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y,
                    int64_t ldy, bool accumulate);
void rank_update(int64_t M, int64_t N, int64_t n, const float* A, int64_t lda, const float* B, int64_t ldb, float* D,
                 int64_t ldd);
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch = 1, int64_t stride_a = 0, int64_t stride_b = 0,
          int64_t stride_c = 0);
void unary_forward(Unary op, float* y, const float* x, int64_t n);
void unary_backward(Unary op, float* dx, const float* dy, const float* x, int64_t n);
void binary_forward(Binary op, float* out, const float* a, const int64_t* a_strides, const float* b,
                    const int64_t* b_strides, const int64_t* shape, int ndim);
void scale(float* y, const float* x, float alpha, int64_t n);
void axpy(float* y, const float* x, float alpha, int64_t n);
void broadcast_reduce_accumulate(float* g, const int64_t* g_strides, const float* d, const int64_t* shape, int ndim);
void copy_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols, bool accumulate);
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, const float* g, int64_t rows, int64_t N,
                     float eps);
void rmsnorm_backward(float* dx, float* dw, float* dg, const float* dy, const float* x, const float* w, const float* g,
                      const float* rstd, int64_t rows, int64_t N);
void attn_res_read_forward(float* out, float* p, float* r, const float* const* v, int64_t C, int64_t rows, int64_t N,
                           const float* u, float eps);
void attn_res_read_backward(float* const* dv, float* du, const float* dout, const float* const* v, const float* p,
                            const float* r, int64_t C, int64_t rows, int64_t N, const float* u);
void l2norm_forward(float* y, float* rnorm, const float* x, int64_t rows, int64_t N, float eps);
void l2norm_backward(float* dx, const float* dy, const float* y, const float* rnorm, int64_t rows, int64_t N);
void situ_glu_forward(float* y, int64_t ldy, const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t rows,
                      int64_t F, SituParams p);
void situ_glu_backward(float* dg, int64_t lddg, float* du, int64_t lddu, const float* dy, int64_t lddy, const float* g,
                       int64_t ldg, const float* u, int64_t ldu, int64_t rows, int64_t F, SituParams p);
float max_of(const float* x, int64_t n);
float exp_shifted_sum(float* x, int64_t n, float shift);
void softmax_forward(float* y, const float* x, int64_t rows, int64_t N);
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t N);
void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t N);
void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t N);
void conv1d_forward(float* y, float* state_out, const float* x, const float* w, const float* state_in, int64_t B,
                    int64_t T, int64_t C, int64_t W);
void conv1d_backward(float* dx, float* dw, float* dstate_in, const float* dy, const float* x, const float* w,
                     const float* state_in, int64_t B, int64_t T, int64_t C, int64_t W);
void rope_forward(float* y, const float* x, const float* cos, const float* sin, int64_t T, int64_t heads, int64_t N,
                  RopeLayout layout);
void rope_backward(float* dx, const float* dy, const float* cos, const float* sin, int64_t T, int64_t heads, int64_t N,
                   RopeLayout layout);
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, AttentionShape s);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, AttentionShape s);
// Block-sparse attention on attention_forward's sgemm tiles with the unread keys masked: every earlier key is
// scored, so it costs dense attention's FLOPs at sgemm's speed (sparse_attention_* pick it for short sequences).
void masked_sparse_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                     const int32_t* blocks, SparseAttentionShape s);
void masked_sparse_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                      const float* lse, const float* q, const float* k, const float* v,
                                      const int32_t* blocks, SparseAttentionShape s);
void sparse_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                              const int32_t* blocks, SparseAttentionShape s);
void sparse_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                               const float* q, const float* k, const float* v, const int32_t* blocks,
                               SparseAttentionShape s);
int64_t cross_entropy_forward(float* loss, float* lse, const float* h, const float* W, const int64_t* targets,
                              int64_t T, int64_t D, int64_t V, int64_t ignore_index, const float* weights = nullptr,
                              float* nll = nullptr);
void cross_entropy_backward(float* dh, float* dW, float dloss, const float* h, const float* W, const int64_t* targets,
                            const float* lse, int64_t T, int64_t D, int64_t V, int64_t ignore_index,
                            const float* weights = nullptr);
void topk(int32_t* idx, float* val, const float* x, int64_t rows, int64_t N, int64_t k);
void route_weights_forward(float* p, float* denom, const float* s, const int32_t* idx, int64_t T, int64_t E, int64_t k,
                           float scale, bool renormalize);
void gather_rows(float* out, const float* src, const int32_t* idx, int64_t n, int64_t src_rows, int64_t N);
void scatter_add_rows(float* dst, const float* src, const int32_t* idx, const float* w, int64_t n, int64_t dst_rows,
                      int64_t N);
void scatter_add_rows_backward(float* dsrc, float* dw, const float* ddst, const float* src, const int32_t* idx,
                               const float* w, int64_t n, int64_t dst_rows, int64_t N);
void embedding_forward(float* out, const float* table, const int64_t* ids, int64_t T, int64_t V, int64_t D);
void embedding_backward(float* dtable, const float* dout, const int64_t* ids, int64_t T, int64_t V, int64_t D);
void glu_forward(GluParams p, float* y, const float* g, const float* u, int64_t rows, int64_t F);
void grouped_glu_forward(GroupedGluShape s, const int64_t* off, const float* z, const float* const* w1,
                         const float* const* w3, const float* const* w2, GluParams glu, float* y, float* g, float* u);
void grouped_glu_backward(GroupedGluShape s, const int64_t* off, const float* dy, const float* z,
                          const float* const* w1, const float* const* w3, const float* const* w2, const float* g,
                          const float* u, GluParams glu, float* dz, float* const* dw1, float* const* dw3,
                          float* const* dw2);
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, AdamWParams hp);
void kda_gate_forward(float* g, const float* f, const float* A_log, const float* dt_bias, int64_t T, int64_t H,
                      int64_t K, float lower_bound);
void kda_gate_backward(float* df, float* dA_log, float* ddt_bias, const float* dg, const float* f, const float* A_log,
                       const float* dt_bias, int64_t T, int64_t H, int64_t K, float lower_bound);
void kda_recurrent_forward(float* o, float* S_out, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, const float* S0, KdaShape s);
void kda_chunk_forward(float* o, float* S_out, const float* q, const float* k, const float* v, const float* g,
                       const float* beta, const float* S0, KdaShape s);
void kda_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0, const float* dout,
                  const float* dS_out, const float* q, const float* k, const float* v, const float* g,
                  const float* beta, const float* S0, KdaShape s);
void kda_recurrent_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0, const float* dout,
                            const float* dS_out, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, const float* S0, KdaShape s);
double sum_all(const float* x, int64_t n);
void sum_rows_accumulate(float* out, const float* x, int64_t rows, int64_t N);
// Block-quantized products (ops/block_quant.h; ops/cpu/quant_matmul.cc).
void quant_matmul(const QuantMatrix& w, const float* x, int64_t n, float* y, QuantKernel kernel);
void quant_matmul_many(std::span<const QuantMatrix* const> ws, const float* x, int64_t n, std::span<float* const> ys);

}  // namespace myriad::cpu
