#include "model/sparse_mla.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/kernels.h"

namespace myriad {

BlockMeans::BlockMeans(int64_t block, int64_t width)
    : block_(block), width_(width), sum_(static_cast<size_t>(width), 0.0f) {
  MYRIAD_REQUIRE(block > 0 && width > 0, kValue, "block means: block ", block, " and width ", width, " must be > 0");
}

void BlockMeans::append(const float* row) {
  for (int64_t i = 0; i < width_; ++i) sum_[size_t(i)] += row[i];
  if (++rows_ % block_ != 0) return;
  const int64_t b = complete() - 1, tile = width_ * kTile;
  if (b % kTile == 0) means_.resize(means_.size() + size_t(tile), 0.0f);
  const float inv = 1.0f / float(block_);
  float* m = means_.data() + b / kTile * tile + b % kTile;
  for (int64_t i = 0; i < width_; ++i) m[i * kTile] = sum_[size_t(i)] * inv;
  std::fill(sum_.begin(), sum_.end(), 0.0f);
}

std::vector<float> BlockMeans::mean_rows() const {
  std::vector<float> out(static_cast<size_t>(complete() * width_));
  for (int64_t b = 0; b < complete(); ++b)
    for (int64_t i = 0; i < width_; ++i) out[size_t(b * width_ + i)] = mean(b, i);
  return out;
}

BlockMeans BlockMeans::from_mean_rows(int64_t block, int64_t width, const float* rows, int64_t blocks,
                                      const float* partial_sum, int64_t partial_rows) {
  BlockMeans m(block, width);
  MYRIAD_REQUIRE(blocks >= 0 && partial_rows >= 0 && partial_rows < block && (partial_rows == 0 || partial_sum), kValue,
                 "block means: ", blocks, " blocks and ", partial_rows, " rows after them (blocks of ", block, ")");
  const int64_t tile = width * kTile;
  m.means_.assign(static_cast<size_t>((blocks + kTile - 1) / kTile * tile), 0.0f);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < width; ++i)
      m.means_[size_t(b / kTile * tile + i * kTile + b % kTile)] = rows[b * width + i];
  m.rows_ = blocks * block + partial_rows;
  if (partial_rows > 0) std::copy(partial_sum, partial_sum + width, m.sum_.begin());
  return m;
}

void BlockMeans::score(const float* qbar, int64_t n, float* out) const {
  MYRIAD_CHECK(n <= complete(), "block means: scoring ", n, " blocks of ", complete());
  // A tile's kTile scores in one vector (GCC's vector extension: one AVX-512 register, or two AVX2 ones): a
  // column's multiply-add per step. Written as a loop over an array, GCC vectorised across the columns instead and
  // spent the time shuffling.
  using Lane = float __attribute__((vector_size(kTile * sizeof(float))));
  const int64_t tiles = (n + kTile - 1) / kTile, W = width_;
  // Four tiles side by side: four independent chains of multiply-adds (one chain waits on each multiply-add's
  // latency); each tile's sum runs in the same order whatever its neighbours, so a score does not depend on n.
  constexpr int64_t kAtOnce = 4;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t += kAtOnce) {
      const int64_t nt = std::min(kAtOnce, t1 - t);
      const float* m = means_.data() + t * W * kTile;
      Lane acc[kAtOnce] = {};
      for (int64_t i = 0; i < W; ++i)
        for (int64_t u = 0; u < nt; ++u) {
          Lane col;
          std::memcpy(&col, m + (u * W + i) * kTile, sizeof col);
          acc[u] += qbar[i] * col;
        }
      for (int64_t u = 0; u < nt; ++u) {
        const int64_t b0 = (t + u) * kTile, nb = std::min(kTile, n - b0);
        float lanes[kTile];
        std::memcpy(lanes, &acc[u], sizeof lanes);
        std::copy(lanes, lanes + nb, out + b0);
      }
    }
  };
  // One thread up to ~4 MB of means (a million tokens in blocks of 128 are 1.3 MB): a second thread's wake-up cost
  // more than it saved; past that the reads are split.
  if (n * W < (int64_t(1) << 20)) return run(0, tiles);
  parallel_for(tiles, 64, run);
}

void sparse_mla_query_sum(Device device, const float* q, int64_t T, int64_t ldq, int64_t H, int64_t Dn, int64_t Dr,
                          const float* w_uk, int64_t head_stride, int64_t C, float scale, float* qbar) {
  const int64_t W = C + Dr, Dq = Dn + Dr;
  // sum_h q_nope[h] W_uk[h]: one accumulating product per head ([T, Dn] x [Dn, C] into the first C columns).
  if (Dn > 0)
    for (int64_t h = 0; h < H; ++h)
      ops::gemm(device, false, false, T, C, Dn, scale, q + h * Dq, ldq, w_uk + h * head_stride, C, h == 0 ? 0.0f : 1.0f,
                qbar, W);
  if (Dn == 0 || H == 0)
    for (int64_t t = 0; t < T; ++t) std::fill(qbar + t * W, qbar + t * W + C, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    float* pe = qbar + t * W + C;
    std::fill(pe, pe + Dr, 0.0f);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Dr; ++i) pe[i] += q[t * ldq + h * Dq + Dn + i];
    for (int64_t i = 0; i < Dr; ++i) pe[i] *= scale;
  }
}

int64_t sparse_mla_choose(const SparseMlaConfig& s, int64_t t, const float* qbar, const BlockMeans& means,
                          int32_t* out) {
  const int64_t cand = sparse_first_local_block(s, t), k = std::min(cand, s.top_k);
  std::fill(out, out + s.top_k, -1);
  if (k == 0) return 0;
  if (k == cand) {
    std::iota(out, out + k, 0);
    return k;
  }
  // The scores (BlockMeans::score: down the tiles' columns), then one pass keeping the best k so far, sorted by score
  // (a later block must beat a kept one strictly: ties go to the lower block; few insertions happen after the first k).
  thread_local std::vector<float> score, best;
  thread_local std::vector<int32_t> idx;
  score.resize(size_t(cand));
  means.score(qbar, cand, score.data());
  best.assign(size_t(k), 0.0f);
  idx.assign(size_t(k), -1);
  int64_t kept = 0;
  for (int64_t b = 0; b < cand; ++b) {
    const float d = score[size_t(b)];
    if (kept == k && !(d > best[size_t(k - 1)])) continue;
    int64_t pos = kept < k ? kept++ : k - 1;
    for (; pos > 0 && d > best[size_t(pos - 1)]; --pos) {
      best[size_t(pos)] = best[size_t(pos - 1)];
      idx[size_t(pos)] = idx[size_t(pos - 1)];
    }
    best[size_t(pos)] = d;
    idx[size_t(pos)] = int32_t(b);
  }
  std::copy(idx.begin(), idx.end(), out);
  std::sort(out, out + k);
  return k;
}

Tensor sparse_mla_blocks(const SparseMlaConfig& s, const Tensor& q_in, const Tensor& c_kv_in, const Tensor& k_pe_in,
                         int64_t H, int64_t Dn, const float* w_uk, int64_t head_stride, float scale) {
  const Tensor q = q_in.contiguous(), c_kv = c_kv_in.contiguous(), k_pe = k_pe_in.contiguous();
  const int64_t T = c_kv.size(0), C = c_kv.size(1), Dr = T > 0 ? k_pe.numel() / T : 0, W = C + Dr;
  MYRIAD_REQUIRE(q.numel() == T * H * (Dn + Dr) && k_pe.numel() == T * Dr, kShape, "sparse mla: queries ",
                 shape_str(q.shape()), ", c_kv ", shape_str(c_kv.shape()), " and k_pe ", shape_str(k_pe.shape()),
                 " do not match ", H, " heads of ", Dn, " + ", Dr);
  std::vector<float> qbar(static_cast<size_t>(T * W));
  sparse_mla_query_sum(Device::kCPU, q.data<float>(), T, H * (Dn + Dr), H, Dn, Dr, w_uk, head_stride, C, scale,
                       qbar.data());
  BlockMeans means(s.block_size, W);
  std::vector<float> row(static_cast<size_t>(W));
  for (int64_t t = 0; t < T; ++t) {
    std::copy(c_kv.data<float>() + t * C, c_kv.data<float>() + (t + 1) * C, row.begin());
    std::copy(k_pe.data<float>() + t * Dr, k_pe.data<float>() + (t + 1) * Dr, row.begin() + C);
    means.append(row.data());
  }
  Tensor blocks = Tensor::empty({1, T, s.top_k}, DType::kI32);
  int32_t* out = blocks.data<int32_t>();
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t t = 0; t < T; ++t) sparse_mla_choose(s, t, qbar.data() + t * W, means, out + t * s.top_k);
  return blocks;
}

std::vector<KeyRange> sparse_mla_ranges(const SparseMlaConfig& s, int64_t t, const int32_t* chosen) {
  std::vector<KeyRange> r(static_cast<size_t>(s.top_k + 1));
  r.resize(size_t(sparse_key_ranges(s.block_size, s.local_blocks(), s.top_k, chosen, t, r.data())));
  return r;
}

}  // namespace myriad
