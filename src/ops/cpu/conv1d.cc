// Causal depthwise conv1d with carried state (KDA's short convolutions), CPU. Channels are the contiguous
// axis, so the inner loop runs over channels with the tap weights held per channel; threads split
// (batch, time) rows for the forward and channel blocks for the backward (dw is summed over time per
// channel, so channel blocks never race).
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"

namespace myriad::cpu {

namespace {
// Row t of concat(state_in, x) for sequence b (S = W-1 rows of state first); nullptr = zeros.
inline const float* padded_row(const float* x, const float* state_in, int64_t b, int64_t t, int64_t T, int64_t C,
                               int64_t S) {
  if (t < S) return state_in ? state_in + (b * S + t) * C : nullptr;
  return x + (b * T + t - S) * C;
}
}  // namespace

void conv1d_forward(float* y, float* state_out, const float* x, const float* w, const float* state_in, int64_t B,
                    int64_t T, int64_t C, int64_t W) {
  const int64_t S = W - 1;
  // Transposed taps [W, C] so the channel loop reads them contiguously (a per-thread buffer: decode runs this
  // three times per KDA layer and token).
  thread_local std::vector<float> wt;
  if (wt.size() < size_t(W * C)) wt.resize(size_t(W * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < W; ++j) wt[size_t(j * C + c)] = w[c * W + j];
  const float* taps = wt.data();  // this thread's buffer, for the workers (the name wt is per thread)
  parallel_for(B * T, std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / T, t = r % T;
      float* yr = y + r * C;
      std::fill(yr, yr + C, 0.0f);
      for (int64_t j = 0; j < W; ++j) {
        const float* xr = padded_row(x, state_in, b, t + j, T, C, S);
        if (!xr) continue;
        const float* wj = taps + j * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] += wj[c] * xr[c];
      }
    }
  });
  if (state_out) {
    // Last S rows of concat(state_in, x); written via a temporary in case state_out aliases state_in.
    thread_local std::vector<float> tail;
    tail.assign(size_t(B * S * C), 0.0f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const float* src = padded_row(x, state_in, b, T + s, T, C, S);
        if (src) std::copy(src, src + C, tail.begin() + (b * S + s) * C);
      }
    std::copy(tail.begin(), tail.end(), state_out);
  }
}

void conv1d_backward(float* dx, float* dw, float* dstate_in, const float* dy, const float* x, const float* w,
                     const float* state_in, int64_t B, int64_t T, int64_t C, int64_t W) {
  const int64_t S = W - 1;
  constexpr int64_t kBlock = 64;  // channels per task
  const int64_t blocks = (C + kBlock - 1) / kBlock;
  parallel_for(blocks, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t kb = k0; kb < k1; ++kb) {
      const int64_t c0 = kb * kBlock, c1 = std::min(C, c0 + kBlock), nc = c1 - c0;
      float dwl[kBlock * 8];  // W <= 8 fast path; wider convs use the heap
      std::vector<float> dw_heap;
      float* dwb = dwl;
      if (W > 8) {
        dw_heap.assign(size_t(nc * W), 0.0f);
        dwb = dw_heap.data();
      } else {
        std::fill(dwl, dwl + kBlock * 8, 0.0f);
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
          const float* g = dy + (b * T + t) * C;
          for (int64_t j = 0; j < W; ++j) {
            const int64_t tt = t + j;
            const float* xr = padded_row(x, state_in, b, tt, T, C, S);
            float* dxr = tt < S ? (dstate_in ? dstate_in + (b * S + tt) * C : nullptr) : dx + (b * T + tt - S) * C;
            for (int64_t c = c0; c < c1; ++c) {
              if (dxr) dxr[c] += w[c * W + j] * g[c];
              if (xr) dwb[(c - c0) * W + j] += g[c] * xr[c];
            }
          }
        }
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t j = 0; j < W; ++j) dw[c * W + j] += dwb[(c - c0) * W + j];
    }
  });
}

}  // namespace myriad::cpu
