// Fused linear + cross-entropy on the CPU. The logits of a chunk of rows ([chunk, V]) are one sgemm;
// their log-sum-exp and the target logit are read off and the chunk is discarded, so memory is
// O(chunk x V), never O(T x V). The backward recomputes each chunk's logits, turns them into
// (softmax - onehot) * dloss / count in place, and feeds two sgemms (dh += G W, dW += G^T h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/fast_math.h"

namespace myriad::cpu {

namespace {

// Rows per chunk: about 8 MiB of logits, at least 1 row.
int64_t chunk_rows(int64_t V) {
  return std::max<int64_t>(1, (int64_t(2) << 20) / std::max<int64_t>(V, 1));
}

void check_targets(const int64_t* targets, int64_t T, int64_t V, int64_t ignore_index) {
  for (int64_t t = 0; t < T; ++t)
    MYRIAD_REQUIRE(targets[t] == ignore_index || (targets[t] >= 0 && targets[t] < V), kValue, "cross_entropy: target ",
                   targets[t], " at position ", t, " is outside the vocabulary [0, ", V, ") and is not ignore_index (",
                   ignore_index, ")");
}

}  // namespace

int64_t cross_entropy_forward(float* loss, float* lse, const float* h, const float* W, const int64_t* targets,
                              int64_t T, int64_t D, int64_t V, int64_t ignore_index, const float* weights, float* nll) {
  check_targets(targets, T, V, ignore_index);
  const int64_t chunk = std::min(chunk_rows(V), std::max<int64_t>(T, 1));
  std::vector<float> logits(size_t(chunk * V));
  double total = 0.0;
  int64_t count = 0;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t rows = std::min(chunk, T - t0);
    gemm(false, true, rows, V, D, 1.0f, h + t0 * D, D, W, D, 0.0f, logits.data(), V);
    parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* lr = logits.data() + r * V;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < V; ++c) mx = std::max(mx, lr[c]);
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < V; ++c) s += fast_exp(lr[c] - mx);
        lse[t0 + r] = mx + std::log(s);
      }
    });
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t tgt = targets[t0 + r];
      if (nll) nll[t0 + r] = 0.0f;
      if (tgt == ignore_index) continue;
      const double x = double(lse[t0 + r]) - double(logits[size_t(r * V + tgt)]);
      if (nll) nll[t0 + r] = float(x);
      total += weights ? double(weights[t0 + r]) * x : x;
      ++count;
    }
  }
  *loss = weights ? float(total) : count ? float(total / double(count)) : 0.0f;
  return count;
}

void cross_entropy_backward(float* dh, float* dW, float dloss, const float* h, const float* W, const int64_t* targets,
                            const float* lse, int64_t T, int64_t D, int64_t V, int64_t ignore_index,
                            const float* weights) {
  int64_t count = 0;
  for (int64_t t = 0; t < T; ++t) count += targets[t] != ignore_index;
  if (count == 0 || V == 0) return;
  const float g_scale = dloss / float(count);
  const int64_t chunk = std::min(chunk_rows(V), T);
  std::vector<float> G(size_t(chunk * V));
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t rows = std::min(chunk, T - t0);
    gemm(false, true, rows, V, D, 1.0f, h + t0 * D, D, W, D, 0.0f, G.data(), V);
    parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* gr = G.data() + r * V;
        const int64_t tgt = targets[t0 + r];
        if (tgt == ignore_index) {
          std::fill(gr, gr + V, 0.0f);
          continue;
        }
        const float l = lse[t0 + r];
        const float gs = weights ? dloss * weights[t0 + r] : g_scale;
#pragma omp simd
        for (int64_t c = 0; c < V; ++c) gr[c] = fast_exp(gr[c] - l) * gs;
        gr[tgt] -= gs;
      }
    });
    gemm(false, false, rows, D, V, 1.0f, G.data(), V, W, D, 1.0f, dh + t0 * D, D);
    gemm(true, false, V, D, rows, 1.0f, G.data(), V, h + t0 * D, D, 1.0f, dW, D);
  }
}

}  // namespace myriad::cpu
