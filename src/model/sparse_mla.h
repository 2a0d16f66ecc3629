// Block-sparse MLA (issue 17; the seed's Stage 2 "sparse attention"; an option: K3 itself is dense). The choice of
// the keys a query reads lives here, once; training (Transformer's MLA on the tape, a masked attention op) and
// inference (MlaDecoder over the latent cache) both call it.
//
// Config mla_sparse_attention {block_size B, top_k k, window}; L = window / B local blocks. For the query at
// position t of its sequence (0-based; the cache index in inference):
//   local keys     [f_t * B, t] with f_t = max(0, t / B - L): the query's own block and the L blocks before it
//   candidates     blocks 0 .. f_t - 1 (complete, all before the local keys)
//   block score    s_b = qbar_t . m_b, where m_b is the mean of block b's latent rows [c_kv | k_pe] (c_kv normed,
//                  k_pe rotated when RoPE is on: the rows MLA caches) and qbar_t = scale * sum_h [q_nope[h] W_uk[h]
//                  | q_pe[h]], the absorbed query summed over the heads. A head's logit is linear in the key row,
//                  so s_b is the block's mean logit summed over heads: the scorer costs one W-wide dot per block.
//   chosen         the top_k candidates by score (ties to the lower block), in ascending order; every candidate
//                  when there are at most top_k
// and the query attends, with an exact softmax, over the chosen blocks' keys and its local keys. Its cost per
// query is O(window + B + k B) for the attention plus O(t / B) W-wide dots for the scores, not O(t) attention.
// The selection is not differentiated (a discrete choice); the attention over the chosen keys is.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "ops/kernels.h"

namespace myriad {

// f_t: the first local block of the query at position t.
inline int64_t sparse_first_local_block(const SparseMlaConfig& s, int64_t t) {
  return sparse_first_local_block(s.block_size, s.local_blocks(), t);
}

// How many keys the query at position t reads: its local keys and its chosen blocks'.
inline int64_t sparse_mla_keys(const SparseMlaConfig& s, int64_t t) {
  const int64_t f = sparse_first_local_block(s, t);
  return t + 1 - f * s.block_size + std::min(f, s.top_k) * s.block_size;
}

// The running means of a sequence's latent rows per block of B tokens: rows appended in order, each block's mean
// fixed when its last row arrives (the sum in token order, times 1 / B, so that training and inference, which
// append the same rows in the same order, hold the same floats).
//
// Stored in tiles of kTile blocks, each tile [width][kTile] (a tile's blocks side by side per column), so that
// scoring a query against every block is kTile-wide multiply-adds down the columns with no horizontal sums: at 1M
// tokens in blocks of 128 a decode step scores 8K blocks, and a row-at-a-time dot product of 40 numbers spent more
// on its reduction (and on waking a second thread) than on reading the means.
class BlockMeans {
 public:
  static constexpr int64_t kTile = 16;
  BlockMeans() = default;
  BlockMeans(int64_t block, int64_t width);
  void append(const float* row);
  int64_t block() const { return block_; }
  int64_t width() const { return width_; }
  int64_t rows() const { return rows_; }
  int64_t complete() const { return rows_ / std::max<int64_t>(block_, 1); }  // blocks with a mean
  float mean(int64_t b, int64_t i) const {  // element i of block b's mean (b < complete())
    return means_[size_t((b / kTile) * width_ * kTile + i * kTile + b % kTile)];
  }
  // out[b] = qbar . mean of block b for the blocks b < n (n <= complete()); qbar [width].
  void score(const float* qbar, int64_t n, float* out) const;
  // For files (infer/sequence_file.h): the complete blocks' means as rows [complete(), width], the running sum of
  // the rows after them [width], and means rebuilt from such rows (`blocks` of them) and sum (of `partial_rows`
  // rows, < block; null when 0).
  std::vector<float> mean_rows() const;
  const std::vector<float>& partial_sum() const { return sum_; }
  static BlockMeans from_mean_rows(int64_t block, int64_t width, const float* rows, int64_t blocks,
                                   const float* partial_sum = nullptr, int64_t partial_rows = 0);
  // The means of the first n rows; `row(t, out)` gives row t (f32) when n ends inside a block.
  template <class RowOf>
  BlockMeans prefix(int64_t n, RowOf row) const {
    if (n == rows_) return *this;  // exact: the running sum as appended, not re-summed from stored (rounded) rows
    BlockMeans b(block_, width_);
    const int64_t full = n / block_, tile = width_ * kTile;
    b.means_.assign(means_.begin(), means_.begin() + (full + kTile - 1) / kTile * tile);
    for (int64_t j = full; j % kTile != 0; ++j)  // the last tile's blocks past the prefix: not yet complete there
      for (int64_t i = 0; i < width_; ++i) b.means_[size_t(j / kTile * tile + i * kTile + j % kTile)] = 0.0f;
    b.rows_ = full * block_;
    std::vector<float> r(static_cast<size_t>(width_));
    for (int64_t t = b.rows_; t < n; ++t) {
      row(t, r.data());
      b.append(r.data());
    }
    return b;
  }

 private:
  int64_t block_ = 0, width_ = 0, rows_ = 0;
  std::vector<float> means_;  // [ceil(complete / kTile) tiles][width][kTile]
  std::vector<float> sum_;    // the partial block's running sum [width]
};

// qbar [T, C + Dr] of T queries q [T, ldq] (each row H heads of [q_nope (Dn) | q_pe (Dr)]): scale * sum_h
// [q_nope[h] W_uk[h] | q_pe[h]], W_uk[h] = w_uk + h * head_stride, [Dn, C] row-major (kv_b_proj's key rows).
void sparse_mla_query_sum(Device device, const float* q, int64_t T, int64_t ldq, int64_t H, int64_t Dn, int64_t Dr,
                          const float* w_uk, int64_t head_stride, int64_t C, float scale, float* qbar);

// The blocks the query at position t reads beyond its local keys: the chosen candidates in ascending order into
// out[0 .. top_k), -1 after them; returns how many. qbar [W] its summed query, means the sequence's block means
// (at least f_t complete).
int64_t sparse_mla_choose(const SparseMlaConfig& s, int64_t t, const float* qbar, const BlockMeans& means,
                          int32_t* out);

// Every query's blocks for a whole sequence (training): q [T, H (Dn + Dr)] the queries (q_pe rotated), the latent
// rows c_kv [T, C] (normed) and k_pe [T, Dr] (rotated), w_uk / head_stride as above. Returns I32 [1, T, top_k] for
// ag::sparse_attention.
Tensor sparse_mla_blocks(const SparseMlaConfig& s, const Tensor& q, const Tensor& c_kv, const Tensor& k_pe, int64_t H,
                         int64_t Dn, const float* w_uk, int64_t head_stride, float scale);

// The key ranges [begin, end) the query at position t reads (ops::sparse_key_ranges: its chosen blocks, out of
// sparse_mla_choose, then its local keys).
std::vector<KeyRange> sparse_mla_ranges(const SparseMlaConfig& s, int64_t t, const int32_t* chosen);

}  // namespace myriad
