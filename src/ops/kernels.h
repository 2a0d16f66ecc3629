// The kernel table: every op of myriad once, as plain functions over raw buffers (row-major, outermost axis
// first), and the one entry point through which everything above src/ops calls it: ops::NAME(device, ...)
// runs the kernel of that device (the device of the tensors whose buffers are passed). Implementations:
//   ref::   the oracle: naive loops, templated on the scalar type (float or double) so finite differences
//           can run in double (src/ops/ref/);
//   cpu::   the fast kernels: OpenBLAS, OpenMP threads, AVX2/FMA/AVX-512 vectorisation (src/ops/cpu/);
//   cuda::  device kernels over device pointers (src/ops/cuda/, built with the `cuda` preset).
// Dispatch (src/ops/dispatch.cc): an op without a kernel for the device throws Error(kUnsupported) naming the op
// and the device ("op 'topk' has no kernel for device cuda"); the cuda:: kernels of a build without CUDA throw
// kUnsupported too (no CUDA tensor can exist there). ops/cpu/* and ops/cuda/* are included only inside src/ops
// (scripts/check_layers.py refuses them elsewhere).
// Conventions:
//   - forward kernels overwrite their outputs;
//   - backward kernels ACCUMULATE (+=) into every gradient output, so a tensor used twice simply receives
//     both contributions and parameter gradients accumulate across micro-batches with no extra buffers;
//   - sizes are int64_t; any size may be 0 (degenerate shapes are legal and do nothing);
//   - "ld" arguments are row strides in elements, so a kernel can read a column block of a wider matrix
//     (e.g. the gate half of a fused [T, 2F] projection) without a copy.
// Shape legend: T tokens, B batch, H query heads, Hk key/value heads, Dk q/k head width, Dv v head width,
// C channels, W conv width, V vocabulary, N row length, k top-k.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace myriad {

// kGeluTanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's gelu(approximate="tanh"), the vision
// tower's MLP); kGelu: the exact 0.5 x (1 + erf(x / sqrt(2))) (the vision projector's).
enum class Unary : uint8_t { kSiLU, kSigmoid, kTanh, kSoftplus, kGeluTanh, kGelu };
enum class Binary : uint8_t { kAdd, kMul };

// SiTU-GLU constants (docs/design.md §1.5): y = [b1 tanh(g/b1) sigmoid(g)] * h(u), h(u) = b2 tanh(u/b2), or h(u) = u
// when b2 is +infinity (activation_situ_linear_beta null: the up projection unclamped).
struct SituParams {
  float beta = 4.0f;          // activation_situ_beta (b1)
  float linear_beta = 25.0f;  // activation_situ_linear_beta (b2)
};

// The GLU inside each routed expert: SiTU-GLU (docs/design.md §1.5), or SwiGLU silu(g) * u (hidden_act "silu").
enum class GluKind : uint8_t { kSitu, kSwiGlu };
struct GluParams {
  GluKind kind = GluKind::kSitu;
  SituParams situ;  // read for kSitu only
};

// Grouped experts: E experts, C token copies sorted by expert, L expert input/output width, F expert width.
// cuts (optional, sorted, num_cuts of them): row boundaries inside the experts' ranges at which an expert's rows
// are split into separate products (run one after another on the expert's thread). Under expert parallelism each
// source rank's copies are one piece, so that a row's result is the one a process running those copies alone gets
// (BLAS picks its kernels, and so its rounding, by the rows of a product).
struct GroupedGluShape {
  int64_t E = 0, C = 0, L = 0, F = 0;
  const int64_t* cuts = nullptr;
  int64_t num_cuts = 0;
};

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based, for bias correction
};

// Rotary embedding over the rotated columns [col0, col0 + R) of each row; the other columns pass through.
// cos/sin tables are [T, R/2] (already scaled by YaRN's mscale where it applies). Pairing: column j with
// j + R/2 ("rotate half", the HF convention) unless interleaved, where column 2j pairs with 2j+1.
struct RopeLayout {
  int64_t col0 = 0;
  int64_t rot = 0;  // R, even
  bool interleaved = false;
};

// Attention: q [B, T, H, Dk], k [B, T, Hk, Dk], v [B, T, Hk, Dv], out [B, T, H, Dv], lse [B, H, T]
// (log-sum-exp of each query row's scaled scores, saved for backward). H must be a multiple of Hk. Causal
// (query i sees keys 0..i: the text model) unless `causal` is false (every query sees all T keys: the vision
// tower's attention within one image).
struct AttentionShape {
  int64_t B = 1, T = 0, H = 1, Hk = 1, Dk = 0, Dv = 0;
  float scale = 1.0f;
  bool causal = true;
};

// Block-sparse causal attention (model/sparse_mla.h chooses the blocks): query i of sequence b reads the keys of
// blocks[(b T + i) top_k + 0 .. top_k) (block numbers, ascending, -1 after the last; each wholly before the query's
// local keys) and its local keys [sparse_first_local_block(i) block, i], with an exact softmax over them.
// q [B, T, H, Dk], k [B, T, Hk, Dk], v [B, T, Hk, Dv], out [B, T, H, Dv], lse [B, H, T] (as AttentionShape;
// attn.causal must be true).
struct SparseAttentionShape {
  AttentionShape attn;
  int64_t block = 64, local_blocks = 0, top_k = 0;
};
// The first block of the local keys of the query at position t.
inline int64_t sparse_first_local_block(int64_t block, int64_t local_blocks, int64_t t) {
  return t / block > local_blocks ? t / block - local_blocks : 0;
}
// The keys the query at position t reads, as ranges [begin, end) in ascending order (adjacent ones merged): its
// chosen blocks (chosen[0 .. top_k), -1 after the last) then its local keys. r holds top_k + 1; returns how many.
struct KeyRange {
  int64_t begin, end;
};
inline int64_t sparse_key_ranges(int64_t block, int64_t local_blocks, int64_t top_k, const int32_t* chosen, int64_t t,
                                 KeyRange* r) {
  int64_t n = 0;
  auto add = [&](int64_t b, int64_t e) {
    if (n > 0 && r[n - 1].end == b)
      r[n - 1].end = e;
    else
      r[n++] = {b, e};
  };
  for (int64_t c = 0; c < top_k && chosen[c] >= 0; ++c) add(chosen[c] * block, (chosen[c] + 1) * block);
  add(sparse_first_local_block(block, local_blocks, t) * block, t + 1);
  return n;
}

// Block-sparse attention runs two ways: over each query's gathered keys, or as dense attention's sgemm tiles with
// the unread keys masked (as many products as dense, but sgemm runs them many times faster per key). Masked wins
// while a dense query's mean keys are at most kSparseMaskedFactor times a sparse query's: the crossover measured on
// configs/tiny-longctx.json's MLA layer (block 64, top 16, window 256; `myriad bench model --seq T`, forward +
// backward, 2 threads): at 16K tokens (dense/sparse keys 6.3x) masked 1.91 s vs gathered 2.48 s, at 32K (12.5x)
// masked 9.5 s vs gathered ~5 s. Training (ops/cpu/sparse_attention.cc) and prefill (MlaDecoder) share the rule.
inline constexpr double kSparseMaskedFactor = 8.0;
inline bool prefer_masked_sparse(double dense_keys, double sparse_keys) {
  return dense_keys <= kSparseMaskedFactor * sparse_keys;
}

// Kimi Delta Attention (docs/design.md §1.2), per sequence b and head h: q, k, g [B, T, H, K]; v [B, T, H, V];
// beta [B, T, H]; states [B, H, K, V] (S0 null = zeros: a fresh sequence). q, k arrive L2-normalised (q also
// scaled by K^-1/2); g <= 0 is the per-channel log-decay. Per token: S <- Diag(e^g) S; S <- S + beta k (v - S^T k)^T;
// o = S^T q. The chunkwise form does `chunk` tokens at a time with matrix products (WY form of the delta rule).
struct KdaShape {
  int64_t B = 1, T = 0, H = 1, K = 0, V = 0;
  int64_t chunk = 64;
};

namespace ops {

// Throws Error(kUnsupported): op has no kernel for device (what every entry does for a device it lacks).
[[noreturn]] void missing_kernel(const char* op, Device device);

// Decode-sized products Y = X W^T for a few rows of X (n <= 16 or so): X [n, K], W [N, K] row-major, Y [n, N] at
// row stride ldy (overwritten). Each row of W is read from memory once and dotted with every row of X while it
// sits in L1 (four X rows at a time, four independent accumulators), where sgemm would pack (copy) all of W.
// Threads (OpenMP) split the rows of W when N * K is large enough; single-threaded otherwise.
void gemm_skinny(Device device, int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y, int64_t ldy);

// Few-row products over bf16 operands (a bf16 MLA latent cache), single-threaded:
//   gemm_skinny_bf16: Y [n, N] (row stride ldy) = X [n, K] W [N, K]^T, X and W bf16 (row strides ldx, ldw), sums
//                     in f32. With AVX512-BF16 (bf16_dot_native()) through vdpbf16ps, 32 products per instruction;
//                     elsewhere a portable loop (exact products of the bf16 values, f32 sums).
//   bf16_to_f32_rows: dst [n, K] (stride ldd) = src [n, K] (stride lds) widened to f32 (exact).
//   f32_to_bf16_rows: dst [n, K] (stride ldd) = src rounded to nearest even, zero-filled from K to ldd.
void gemm_skinny_bf16(Device device, int64_t n, int64_t N, int64_t K, const uint16_t* X, int64_t ldx, const uint16_t* W,
                      int64_t ldw, float* Y, int64_t ldy);

bool bf16_dot_native(Device device);

void bf16_to_f32_rows(Device device, float* dst, int64_t ldd, const uint16_t* src, int64_t lds, int64_t n, int64_t K);

void f32_to_bf16_rows(Device device, uint16_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t n, int64_t K);

// The two other products of a few rows, single-threaded (callers run many of them in parallel, one per MoE
// expert), where sgemm would spend its time packing the big operand:
//   gemm_skinny_nn: Y [n, N] = (accumulate ? Y : 0) + X [n, K] W [K, N]   (W not transposed; read once)
//   rank_update:    D [M, N] += A^T B, A [n, M], B [n, N]                  (a weight gradient; D read and written once)
void gemm_skinny_nn(Device device, int64_t n, int64_t N, int64_t K, const float* X, int64_t ldx, const float* W,
                    int64_t ldw, float* Y, int64_t ldy, bool accumulate);

void rank_update(Device device, int64_t M, int64_t N, int64_t n, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* D, int64_t ldd);

// C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b]; op = transpose when ta / tb. A is M x K after op, B is K x N.
void gemm(Device device, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch = 1, int64_t stride_a = 0,
          int64_t stride_b = 0, int64_t stride_c = 0);

void unary_forward(Device device, Unary op, float* y, const float* x, int64_t n);

void unary_backward(Device device, Unary op, float* dx, const float* dy, const float* x, int64_t n);

// out[i] = a[i] op b[i] over a broadcast shape: a_strides/b_strides hold 0 on broadcast axes.
void binary_forward(Device device, Binary op, float* out, const float* a, const int64_t* a_strides, const float* b,
                    const int64_t* b_strides, const int64_t* shape, int ndim);

void scale(Device device, float* y, const float* x, float alpha, int64_t n);  // y = alpha * x (y may be x)

void axpy(Device device, float* y, const float* x, float alpha, int64_t n);  // y += alpha * x

// The backward of a broadcast: g[o(i)] += d[i] for every element i of the contiguous d over `shape` (ndim axes,
// HOST array), o(i) = sum_k c_k(i) g_strides[k] (HOST array, 0 on the axes g was broadcast along).
void broadcast_reduce_accumulate(Device device, float* g, const int64_t* g_strides, const float* d,
                                 const int64_t* shape, int ndim);
// Strided rows: dst[r, j] = src[r, j] (accumulate: +=) for r < rows, j < cols; row strides ldd, lds (slices and
// concatenations along the last axis, and their backwards).
void copy_rows(Device device, float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols,
               bool accumulate);

// RMSNorm over rows of N: y = x * rstd * w (* sigmoid(g) when g != null: the per-head gated form of KDA's
// output norm, w shared by all rows). rstd [rows] is saved for backward.
void rmsnorm_forward(Device device, float* y, float* rstd, const float* x, const float* w, const float* g, int64_t rows,
                     int64_t N, float eps);

void rmsnorm_backward(Device device, float* dx, float* dw, float* dg, const float* dy, const float* x, const float* w,
                      const float* g, const float* rstd, int64_t rows, int64_t N);

// The AttnRes read (docs/design.md §1.4) of C candidates v[c], each [rows, N], with u = w_norm * w_proj [N]:
//   r[t, c] = 1 / sqrt(mean_j v[c][t, j]^2 + eps), s[t, c] = r[t, c] (u . v[c][t]), p[t] = softmax_c(s[t]),
//   out[t] = sum_c p[t, c] v[c][t];  p and r [rows, C] are saved for the backward.
// One op for what was rmsnorm + projection + softmax + weighted sum per candidate (ops/cpu/attn_res.cc).
void attn_res_read_forward(Device device, float* out, float* p, float* r, const float* const* v, int64_t C,
                           int64_t rows, int64_t N, const float* u, float eps);
// Accumulates dv[c] (null: not wanted) and du [N].
void attn_res_read_backward(Device device, float* const* dv, float* du, const float* dout, const float* const* v,
                            const float* p, const float* r, int64_t C, int64_t rows, int64_t N, const float* u);

// L2 normalisation over rows: y = x / sqrt(sum x^2 + eps); rnorm [rows] saved.
void l2norm_forward(Device device, float* y, float* rnorm, const float* x, int64_t rows, int64_t N, float eps);

void l2norm_backward(Device device, float* dx, const float* dy, const float* y, const float* rnorm, int64_t rows,
                     int64_t N);

// SiTU-GLU over [rows, F]: g and u rows at strides ldg / ldu, y at ldy.
void situ_glu_forward(Device device, float* y, int64_t ldy, const float* g, int64_t ldg, const float* u, int64_t ldu,
                      int64_t rows, int64_t F, SituParams p);

void situ_glu_backward(Device device, float* dg, int64_t lddg, float* du, int64_t lddu, const float* dy, int64_t lddy,
                       const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t rows, int64_t F, SituParams p);

// Pieces of an online softmax (MLA decode), vectorised with tree reductions (a plain loop keeps the max serial):
//   max_of:          the largest of x [n] (-inf for n = 0; NaNs are skipped, as std::max skips them)
//   exp_shifted_sum: x[j] = exp(x[j] - shift) in place (cpu::fast_exp), returns their sum
float max_of(Device device, const float* x, int64_t n);

float exp_shifted_sum(Device device, float* x, int64_t n, float shift);

// Softmax / log-softmax over rows of N.
void softmax_forward(Device device, float* y, const float* x, int64_t rows, int64_t N);

void softmax_backward(Device device, float* dx, const float* dy, const float* y, int64_t rows, int64_t N);

void log_softmax_forward(Device device, float* y, const float* x, int64_t rows, int64_t N);

void log_softmax_backward(Device device, float* dx, const float* dy, const float* y, int64_t rows, int64_t N);

// Causal depthwise conv1d with carried state. x [B, T, C], w [C, W], state_in [B, W-1, C] (null = zeros:
// a fresh sequence), y [B, T, C], state_out [B, W-1, C] (the last W-1 inputs, for the next piece; may be null).
// y[b,t,c] = sum_j w[c,j] * xx[b, t+j, c] with xx = concat(state_in, x) along time.
void conv1d_forward(Device device, float* y, float* state_out, const float* x, const float* w, const float* state_in,
                    int64_t B, int64_t T, int64_t C, int64_t W);

void conv1d_backward(Device device, float* dx, float* dw, float* dstate_in, const float* dy, const float* x,
                     const float* w, const float* state_in, int64_t B, int64_t T, int64_t C, int64_t W);

// RoPE on rows [T, heads, row] (row width N, rotated columns per layout); cos/sin [T, R/2].
void rope_forward(Device device, float* y, const float* x, const float* cos, const float* sin, int64_t T, int64_t heads,
                  int64_t N, RopeLayout layout);

void rope_backward(Device device, float* dx, const float* dy, const float* cos, const float* sin, int64_t T,
                   int64_t heads, int64_t N, RopeLayout layout);

// Tiled causal attention (memory O(T x tile), never O(T^2)).
void attention_forward(Device device, float* out, float* lse, const float* q, const float* k, const float* v,
                       AttentionShape s);

void attention_backward(Device device, float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, AttentionShape s);

// Block-sparse attention (SparseAttentionShape); the backward accumulates into dq, dk, dv.
void sparse_attention_forward(Device device, float* out, float* lse, const float* q, const float* k, const float* v,
                              const int32_t* blocks, SparseAttentionShape s);
void sparse_attention_backward(Device device, float* dq, float* dk, float* dv, const float* dout, const float* out,
                               const float* lse, const float* q, const float* k, const float* v, const int32_t* blocks,
                               SparseAttentionShape s);

// Fused linear + cross-entropy: logits = h W^T (h [T, D], W [V, D]) are produced a chunk of rows at a time
// and never stored whole. loss = mean over targets != ignore_index of nll_t = lse_t - logit_t[target]; with
// `weights` [T] (RL's per-token coefficients, any sign) loss = sum over counted targets of weights_t nll_t
// instead. Returns the number of counted targets. lse [T] is saved; nll [T] (optional) gets each nll_t (0 where
// ignored). Backward takes dloss (scalar) and the same weights, and accumulates dh, dW.
int64_t cross_entropy_forward(Device device, float* loss, float* lse, const float* h, const float* W,
                              const int64_t* targets, int64_t T, int64_t D, int64_t V, int64_t ignore_index,
                              const float* weights = nullptr, float* nll = nullptr);

void cross_entropy_backward(Device device, float* dh, float* dW, float dloss, const float* h, const float* W,
                            const int64_t* targets, const float* lse, int64_t T, int64_t D, int64_t V,
                            int64_t ignore_index, const float* weights = nullptr);

// Top-k per row of N, descending; ties go to the lower index. idx [rows, k] (int32), val [rows, k].
void topk(Device device, int32_t* idx, float* val, const float* x, int64_t rows, int64_t N, int64_t k);
// MoE mixture weights from router scores s [T, E] and chosen experts idx [T, k] (-1: a dropped copy, weight 0):
// p [T, k] = scale * s[t, idx] / denom[t], denom = the sum of the chosen scores when renormalize (and > 0), else 1.
// denom [T] may be null.
void route_weights_forward(Device device, float* p, float* denom, const float* s, const int32_t* idx, int64_t T,
                           int64_t E, int64_t k, float scale, bool renormalize);

// Row gather / scatter-add (embedding lookup, MoE token permutation):
//   gather:      out[i, :] = src[idx[i], :]                    (i < n)
//   scatter_add: dst[idx[i], :] += (w ? w[i] : 1) * src[i, :]  (repeated indices are summed, no races)
// Indices are checked against the row count of the indexed table (error, not a crash).
void gather_rows(Device device, float* out, const float* src, const int32_t* idx, int64_t n, int64_t src_rows,
                 int64_t N);

void scatter_add_rows(Device device, float* dst, const float* src, const int32_t* idx, const float* w, int64_t n,
                      int64_t dst_rows, int64_t N);
// Backward of the weighted scatter: dsrc[i] += w[i] * ddst[idx[i]], dw[i] += <ddst[idx[i]], src[i]>.
void scatter_add_rows_backward(Device device, float* dsrc, float* dw, const float* ddst, const float* src,
                               const int32_t* idx, const float* w, int64_t n, int64_t dst_rows, int64_t N);

// Embedding: out[t] = table[ids[t]]; backward dtable[ids[t]] += dout[t]. ids are int64 (token ids).
void embedding_forward(Device device, float* out, const float* table, const int64_t* ids, int64_t T, int64_t V,
                       int64_t D);

void embedding_backward(Device device, float* dtable, const float* dout, const int64_t* ids, int64_t T, int64_t V,
                        int64_t D);

// A GLU over contiguous [rows, F] operands: y = SiTU-GLU(g, u), or silu(g) u for GluKind::kSwiGlu. y may be g.
void glu_forward(Device device, GluParams p, float* y, const float* g, const float* u, int64_t rows, int64_t F);

// The routed experts of an MoE layer as one fused op (docs/design.md §1.5). Copies arrive sorted by expert; expert e
// maps rows [off[e], off[e+1]) of z [C, L] through y = glu(z w1_e^T, z w3_e^T) w2_e^T with w1[e], w3[e] -> [F, L] and
// w2[e] -> [L, F] (E pointers each; off [E + 1], from 0 to C, non-decreasing). Forward overwrites y [C, L] and the
// GLU inputs g, u [C, F] (kept for backward). Backward ACCUMULATES into dz [C, L] and each expert's dw1[e], dw3[e]
// [F, L], dw2[e] [L, F] (null: not wanted); it recomputes the GLU output from g, u. The experts run on their own
// threads, so every expert's weight gradients must be distinct buffers.
void grouped_glu_forward(Device device, GroupedGluShape s, const int64_t* off, const float* z, const float* const* w1,
                         const float* const* w3, const float* const* w2, GluParams glu, float* y, float* g, float* u);
void grouped_glu_backward(Device device, GroupedGluShape s, const int64_t* off, const float* dy, const float* z,
                          const float* const* w1, const float* const* w3, const float* const* w2, const float* g,
                          const float* u, GluParams glu, float* dz, float* const* dw1, float* const* dw3,
                          float* const* dw2);

// AdamW (decoupled weight decay, bias-corrected), in place on p, m, v.
void adamw_update(Device device, float* p, const float* g, float* m, float* v, int64_t n, AdamWParams hp);

// KDA's per-channel log-decay for f [T, H, K], A_log [H], dt_bias [H K], with z = f + dt_bias[h K + c]:
//   lower_bound < 0 finite: g = lower_bound * sigmoid(exp(A_log[h]) z)         (bounded: g in (lower_bound, 0))
//   lower_bound = -infinity: g = -exp(A_log[h]) softplus(z)                      (unbounded, fla's / Kimi-Linear's)
// softplus(z) = log(1 + e^z), taken as z above 20 as torch.nn.functional.softplus does. g may be f (in place).
void kda_gate_forward(Device device, float* g, const float* f, const float* A_log, const float* dt_bias, int64_t T,
                      int64_t H, int64_t K, float lower_bound);

// Its backward, accumulated: df += dg dg/dz, ddt_bias[h K + c] += the same summed over T, dA_log[h] += dg dg/dA_log
// summed over T and K. Any of df, dA_log, ddt_bias may be null (not wanted).
void kda_gate_backward(Device device, float* df, float* dA_log, float* ddt_bias, const float* dg, const float* f,
                       const float* A_log, const float* dt_bias, int64_t T, int64_t H, int64_t K, float lower_bound);

// KDA: the recurrent form (decode: one token at a time, fixed-size state) and the chunkwise-parallel form
// (prefill and training). Both read S0 and write S_out (may be null; for the recurrent form it may equal S0, the
// state then updated in place); they agree to f32 rounding.
void kda_recurrent_forward(Device device, float* o, float* S_out, const float* q, const float* k, const float* v,
                           const float* g, const float* beta, const float* S0, KdaShape s);

void kda_chunk_forward(Device device, float* o, float* S_out, const float* q, const float* k, const float* v,
                       const float* g, const float* beta, const float* S0, KdaShape s);
// Backward through the chunkwise form (accumulates; what training runs): matrix products per chunk, keeping
// one K x V state per chunk of at most 16 chunks at a time (recomputing that segment's forward), never one per
// token. dS_out may be null.
void kda_backward(Device device, float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0,
                  const float* dout, const float* dS_out, const float* q, const float* k, const float* v,
                  const float* g, const float* beta, const float* S0, KdaShape s);
// Backward through the recurrent form (accumulates): chunk-start states from the recurrence, then per token in
// reverse, recomputing one chunk's per-token states at a time. The recurrent form's training cost, and an
// independent check of kda_backward.
void kda_recurrent_backward(Device device, float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0,
                            const float* dout, const float* dS_out, const float* q, const float* k, const float* v,
                            const float* g, const float* beta, const float* S0, KdaShape s);

// The form that runs KDA over a sequence (training's ag::kda, prefill, sequence-parallel shard maps), chosen in
// this one place so that every path computes the same way: the chunkwise form, on every device. Measured inside the
// model (`myriad bench model`, section 2: the KDA mixer's forward + backward with each form, on the mixer's own
// inputs), it was the faster on a Sapphire Rapids Xeon at configs/small.json's shape (2 threads, T 1024, H 8,
// K = V = 64: 54.5 ms per layer against 64 ms recurrent), although the two kernels alone on synthetic inputs
// rank the other way (section 2 prints both). MYRIAD_KDA_FORM=chunk|recurrent overrides it for a process (read
// once), set_kda_sequence_form() within one (the bench times both).
enum class KdaForm { kChunk, kRecurrent };
KdaForm kda_sequence_form(Device device);
void set_kda_sequence_form(KdaForm form);
const char* kda_form_name(KdaForm form);
void kda_sequence_forward(Device device, KdaForm form, float* o, float* S_out, const float* q, const float* k,
                          const float* v, const float* g, const float* beta, const float* S0, KdaShape s);
void kda_sequence_backward(Device device, KdaForm form, float* dq, float* dk, float* dv, float* dg, float* dbeta,
                           float* dS0, const float* dout, const float* dS_out, const float* q, const float* k,
                           const float* v, const float* g, const float* beta, const float* S0, KdaShape s);

// Sum of all elements (double accumulation); sum over rows into [N] (bias/broadcast gradients).
double sum_all(Device device, const float* x, int64_t n);

void sum_rows_accumulate(Device device, float* out, const float* x, int64_t rows,
                         int64_t N);  // out[j] += sum_i x[i, j]

}  // namespace ops
}  // namespace myriad
