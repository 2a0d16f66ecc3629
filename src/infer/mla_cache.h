// The latent cache of gated MLA decoding (docs/design.md §1.3): what infer/mla_decoder.h attends over.
//
// MlaCache: one sequence, one MLA layer. Per token it keeps only
//   c_kv  [kv_lora_rank]      AFTER kv_a_layernorm (normed), and
//   k_pe  [qk_rope_head_dim]  already rotated by its own position when RoPE is on (mla_use_nope false),
// stored as one row [c_kv | k_pe] (width W = C + Dr), rows grouped in pages of `page_tokens` tokens so that a
// serving engine can later hand out pages from a pool. Why normed c_kv: every use of c_kv in the layer (both
// halves of kv_b_proj, and in the absorbed form both the scores and the value sum) reads RMSNorm(c_kv), never the
// raw one, and both take the same room; caching the raw value would mean re-normalising every cached token at
// every decode step (an extra pass over the whole cache, or an extra per-token rstd to carry) for nothing. It is
// also what the reference's absorbed form keeps (kimi_ref.py records the normed c_kv). Likewise k_pe is rotated
// once, at its own position, when it is appended. The row layout [c_kv | k_pe] lets a query row [q_lat | q_pe] score a
// key with ONE dot product of width W (q_lat . c_kv + q_pe . k_pe), and the first C columns of the same rows are the
// "values".
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/sparse_mla.h"
#include "ops/latent_q8.h"

namespace myriad {

class MlaCache {
 public:
  static constexpr int64_t kDefaultPageTokens = 64;

  // dtype: how the rows are stored: kF32 (exact); kBF16 (half the bytes: decode at long context reads the whole
  // cache every token; values rounded to nearest even, relative error <= 2^-9); kQ8_0 (int8 codes per group of 32
  // columns with an f32 scale, error <= half a step of the group, in the page layout of ops/cpu/latent_q8.h, whose
  // int8 products decode uses: ~48% of the f32 bytes at kv_lora_rank 128 + rope 32). See MlaDecoder for how each is
  // read. Other dtypes are refused (kValue).
  // mean_block > 0: the cache also keeps the mean of each block of that many rows (f32, from the rows as appended,
  // before any rounding to the storage dtype), which block-sparse MLA scores (model/sparse_mla.h).
  MlaCache(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens = kDefaultPageTokens, DType dtype = DType::kF32,
           int64_t mean_block = 0);
  // Move-only: the pages are shared-storage tensors, so a plain copy would alias them. clone() copies deeply
  // (e.g. to fork a sequence after a shared prompt).
  MlaCache(MlaCache&&) = default;
  MlaCache& operator=(MlaCache&&) = default;
  MlaCache(const MlaCache&) = delete;
  MlaCache& operator=(const MlaCache&) = delete;
  MlaCache clone() const;
  // The first n tokens SHARING their full pages (no copy): safe because a full page is never written again
  // (appends always go to a new page); a page the prefix ends inside is copied. For prefix reuse across sequences.
  MlaCache share_prefix(int64_t n) const;
  static MlaCache for_config(const ModelConfig& config, int64_t page_tokens = kDefaultPageTokens,
                             DType dtype = DType::kF32) {
    return MlaCache(config.kv_lora_rank, config.qk_rope_head_dim, page_tokens, dtype, mean_block_of(config));
  }
  // The block means a layer of `config` needs: its sparse block size, or 0 (dense MLA).
  static int64_t mean_block_of(const ModelConfig& config) {
    return config.mla_sparse_attention ? config.mla_sparse_attention->block_size : 0;
  }

  // One token: c_kv [C] (normed), k_pe [Dr] (rotated when RoPE is on). Allocates a page when the last is full.
  void append(const float* c_kv, const float* k_pe);
  // n tokens: c_kv [n, C], k_pe [n, Dr] (f32 cpu, any strides).
  void append(const Tensor& c_kv, const Tensor& k_pe);
  // Drops every token and releases the pages (bytes() becomes 0).
  void clear();
  // Keeps the first n tokens (0 <= n <= size()) and releases the pages past them: a rejected speculative draft's
  // rows (infer/speculative.h). As share_prefix: full pages kept, a page n ends inside copied (it may be shared
  // with another sequence's prefix, and appends overwrite its rows past n).
  void truncate(int64_t n);

  int64_t size() const { return size_; }
  int64_t kv_lora_rank() const { return C_; }
  int64_t rope_dim() const { return Dr_; }
  int64_t row_width() const { return C_ + Dr_; }  // W: one cached row is [c_kv | k_pe]
  int64_t page_tokens() const { return page_tokens_; }
  int64_t num_pages() const { return int64_t(pages_.size()); }
  DType dtype() const { return dtype_; }
  // Where the pages live and whose kernels store and load their rows: host memory, the CPU.
  Device device() const { return Device::kCPU; }
  // Bytes one page holds: page_tokens * W * (4 for f32, 2 for bf16); q8: LatentQ8Layout::bytes.
  static size_t page_bytes(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens, DType dtype);
  // Bytes held by the allocated pages: ceil(size / page_tokens) pages.
  size_t bytes() const;

  // Page p: rows [page_tokens, W] (only the first page_rows(p) hold tokens). Token t lives in page
  // t / page_tokens, row t % page_tokens. page() for f32 caches, page_bf16() for bf16 ones (MYRIAD_CHECK).
  const float* page(int64_t p) const;
  const uint16_t* page_bf16(int64_t p) const;
  const uint8_t* page_q8(int64_t p) const;  // kQ8_0 caches: the page in q8_layout()
  const LatentQ8Layout& q8_layout() const;  // kQ8_0 caches
  int64_t page_rows(int64_t p) const;
  const float* row(int64_t t) const;  // [W], f32 caches
  const float* c_kv(int64_t t) const { return row(t); }
  const float* k_pe(int64_t t) const { return row(t) + C_; }
  void row_f32(int64_t t, float* out) const;  // [W] as f32, either dtype
  // Rows [t0, t0 + n) as f32 into out [n, ldo] (any dtype; the range may cross pages).
  void rows_f32(int64_t t0, int64_t n, float* out, int64_t ldo) const;
  int64_t mean_block() const { return means_.block(); }  // 0: no block means
  // For state files (infer/sequence_file.h): a cache over pages as stored (`size` tokens, each page
  // page_bytes(...) bytes; kFormat otherwise) with its block means given or summed from the stored rows;
  // and the block means replaced by ones kept from the original rows
  // (the means of rows rounded to bf16 or q8 would differ from the ones the sequence was scored with).
  static MlaCache from_raw_pages(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens, DType dtype,
                                 int64_t mean_block, int64_t size, std::vector<Tensor> pages,
                                 std::optional<BlockMeans> means = std::nullopt);
  void set_block_means(BlockMeans means);
  const BlockMeans& block_means() const { return means_; }

 private:
  void* next_row();  // the next row's storage (f32 or bf16; the page for q8, the row index being size_ - 1)

  int64_t C_, Dr_, page_tokens_;
  DType dtype_ = DType::kF32;
  std::optional<LatentQ8Layout> q8_;  // kQ8_0 only
  int64_t size_ = 0;
  std::vector<Tensor> pages_;
  BlockMeans means_;  // mean_block > 0
};

}  // namespace myriad
