// Index ops on the CPU: top-k with deterministic ties, row gather / scatter-add (MoE token permutation),
// embedding lookup. Scatter-adds thread over column blocks, so repeated indices never race.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"

namespace myriad::cpu {

namespace {

template <class I>
void check_indices(const I* idx, int64_t n, int64_t rows, const char* op) {
  for (int64_t i = 0; i < n; ++i)
    MYRIAD_REQUIRE(idx[i] >= 0 && int64_t(idx[i]) < rows, kValue, op, ": index ", int64_t(idx[i]), " at position ", i,
                   " is outside [0, ", rows, ")");
}

// Scatter-adds into rows of a table: the copies are counting-sorted by destination row (stable, so each
// element sums its contributions in the original order, as a serial loop would), then threads take whole
// destination rows. Each destination row is written by one thread only and read-modify-written once per
// contribution while it is in cache.
template <class I, class P, class F>
void for_each_destination_row(const I* idx, int64_t n, int64_t rows, P&& prefetch_row, F&& fn) {
  std::vector<int64_t> start(static_cast<size_t>(rows + 1), 0);
  for (int64_t i = 0; i < n; ++i) ++start[size_t(idx[i]) + 1];
  for (int64_t r = 0; r < rows; ++r) start[size_t(r + 1)] += start[size_t(r)];
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[size_t(fill[size_t(idx[i])]++)] = i;
  parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t p = start[size_t(r)]; p < start[size_t(r + 1)]; ++p) {
        // The copies arrive in destination order, so their source rows are scattered: prefetch the row two
        // copies ahead (one cache line in 4 is enough to start the hardware prefetcher on the rest).
        if (p + 2 < n) prefetch_row(order[size_t(p + 2)]);
        fn(r, order[size_t(p)]);
      }
  });
}

// Row copy with non-temporal stores for rows of at least a few vectors: the
// gathered copies are written once and read much later (by the expert GEMMs), so bypassing the cache saves
// the read-for-ownership of every destination line.
inline void copy_row_streaming(float* dst, const float* src, int64_t N) {
#if defined(__AVX512F__) || defined(__AVX__)
#if defined(__AVX512F__)
  constexpr int64_t kLanes = 16;
#else
  constexpr int64_t kLanes = 8;
#endif
  // Plain stores up to the first aligned destination vector, streaming stores for whole vectors, plain tail.
  const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(dst) % (kLanes * 4));
  if (mis % 4 == 0 && N >= 4 * kLanes) {
    const int64_t head = mis ? (kLanes * 4 - mis) / 4 : 0;
    std::memcpy(dst, src, size_t(head) * sizeof(float));
    int64_t j = head;
    for (; j + kLanes <= N; j += kLanes) {
#if defined(__AVX512F__)
      _mm512_stream_ps(dst + j, _mm512_loadu_ps(src + j));
#else
      _mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));
#endif
    }
    std::memcpy(dst + j, src + j, size_t(N - j) * sizeof(float));
    return;
  }
#endif
  std::memcpy(dst, src, size_t(N) * sizeof(float));
}

inline void store_fence() {
#if defined(__SSE__)
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before the caller reads
#endif
}

}  // namespace

void topk(int32_t* idx, float* val, const float* x, int64_t rows, int64_t N, int64_t k) {
  MYRIAD_REQUIRE(k >= 0 && k <= N, kValue, "topk: k = ", k, " must lie in [0, ", N, "]");
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(N, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> order(static_cast<size_t>(N));
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * N;
      std::iota(order.begin(), order.end(), 0);
      // Larger value first; among equal values the lower index (a strict weak order, so the result is unique).
      auto better = [xr](int32_t a, int32_t b) { return xr[a] > xr[b] || (xr[a] == xr[b] && a < b); };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
      for (int64_t j = 0; j < k; ++j) {
        idx[r * k + j] = order[size_t(j)];
        val[r * k + j] = xr[order[size_t(j)]];
      }
    }
  });
}

void gather_rows(float* out, const float* src, const int32_t* idx, int64_t n, int64_t src_rows, int64_t N) {
  check_indices(idx, n, src_rows, "gather_rows");
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(N, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) copy_row_streaming(out + i * N, src + int64_t(idx[i]) * N, N);
  });
  store_fence();
}

void scatter_add_rows(float* dst, const float* src, const int32_t* idx, const float* w, int64_t n, int64_t dst_rows,
                      int64_t N) {
  check_indices(idx, n, dst_rows, "scatter_add_rows");
  auto prefetch = [src, N](int64_t i) {
    for (int64_t j = 0; j < N; j += 64) __builtin_prefetch(src + i * N + j);
  };
  for_each_destination_row(idx, n, dst_rows, prefetch, [&, dst, src, w, N](int64_t r, int64_t i) {
    float* d = dst + r * N;
    const float* s = src + i * N;
    const float a = w ? w[i] : 1.0f;
#pragma omp simd
    for (int64_t j = 0; j < N; ++j) d[j] += a * s[j];
  });
}

void scatter_add_rows_backward(float* dsrc, float* dw, const float* ddst, const float* src, const int32_t* idx,
                               const float* w, int64_t n, int64_t dst_rows, int64_t N) {
  check_indices(idx, n, dst_rows, "scatter_add_rows_backward");
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(N, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* g = ddst + int64_t(idx[i]) * N;
      const float* s = src + i * N;
      float* ds = dsrc + i * N;
      const float a = w ? w[i] : 1.0f;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < N; ++j) {
        ds[j] += a * g[j];
        dot += g[j] * s[j];
      }
      if (dw) dw[i] += dot;
    }
  });
}

void embedding_forward(float* out, const float* table, const int64_t* ids, int64_t T, int64_t V, int64_t D) {
  check_indices(ids, T, V, "embedding");
  parallel_for(T, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) std::memcpy(out + t * D, table + ids[t] * D, size_t(D) * sizeof(float));
  });
}

void embedding_backward(float* dtable, const float* dout, const int64_t* ids, int64_t T, int64_t V, int64_t D) {
  check_indices(ids, T, V, "embedding_backward");
  auto prefetch = [dout, D](int64_t t) {
    for (int64_t j = 0; j < D; j += 64) __builtin_prefetch(dout + t * D + j);
  };
  for_each_destination_row(ids, T, V, prefetch, [&, dtable, dout, D](int64_t r, int64_t t) {
    float* d = dtable + r * D;
    const float* g = dout + t * D;
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) d[j] += g[j];
  });
}

void route_weights_forward(float* p, float* denom, const float* s, const int32_t* idx, int64_t T, int64_t E, int64_t k,
                           float scale, bool renormalize) {
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* id = idx + t * k;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      if (id[j] >= 0) sum += s[t * E + id[j]];
    const float d = renormalize && sum > 0.0f ? sum : 1.0f;
    if (denom) denom[t] = d;
    for (int64_t j = 0; j < k; ++j) p[t * k + j] = id[j] >= 0 ? scale * s[t * E + id[j]] / d : 0.0f;
  }
}

}  // namespace myriad::cpu
