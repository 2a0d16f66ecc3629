// The latent cache of gated MLA decoding (infer/mla_cache.h).
#include "infer/mla_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/kernels.h"

namespace myriad {

namespace {

void check_input(const Tensor& x, const char* what) {
  MYRIAD_REQUIRE(x.defined() && x.device() == Device::kCPU && x.dtype() == DType::kF32, kValue, "mla cache: ", what,
                 " must be a defined f32 cpu tensor");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// MlaCache

MlaCache::MlaCache(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens, DType dtype, int64_t mean_block)
    : C_(kv_lora_rank), Dr_(rope_dim), page_tokens_(page_tokens), dtype_(dtype) {
  MYRIAD_REQUIRE(kv_lora_rank > 0 && rope_dim >= 0, kValue, "mla cache: kv_lora_rank ", kv_lora_rank,
                 " must be > 0 and qk_rope_head_dim ", rope_dim, " >= 0");
  MYRIAD_REQUIRE(page_tokens > 0, kValue, "mla cache: page_tokens ", page_tokens, " must be > 0");
  MYRIAD_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kQ8_0, kValue,
                 "mla cache: rows are stored as F32, BF16 or Q8_0, not ", dtype_name(dtype));
  if (dtype == DType::kQ8_0) q8_.emplace(kv_lora_rank, rope_dim, page_tokens);
  MYRIAD_REQUIRE(mean_block >= 0, kValue, "mla cache: mean_block ", mean_block, " must be >= 0");
  if (mean_block > 0) means_ = BlockMeans(mean_block, kv_lora_rank + rope_dim);
}

void* MlaCache::next_row() {
  const int64_t r = size_ % page_tokens_;
  if (r == 0 && size_ / page_tokens_ == num_pages()) {
    if (q8_) {
      pages_.push_back(Tensor::empty({int64_t(q8_->bytes)}, DType::kU8));
      ops::latent_q8_init_page(device(), *q8_, pages_.back().data<uint8_t>());
    } else {
      pages_.push_back(Tensor::empty({page_tokens_, row_width()}, dtype_));
    }
  }
  Tensor& pg = pages_[size_t(size_ / page_tokens_)];
  ++size_;
  if (q8_) return pg.data<uint8_t>();
  if (dtype_ == DType::kBF16) return pg.data<uint16_t>() + r * row_width();
  return pg.data<float>() + r * row_width();
}

void MlaCache::append(const float* c_kv, const float* k_pe) {
  if (means_.block() > 0) {
    thread_local std::vector<float> whole;
    whole.resize(size_t(row_width()));
    std::copy(c_kv, c_kv + C_, whole.begin());
    std::copy(k_pe, k_pe + Dr_, whole.begin() + C_);
    means_.append(whole.data());
  }
  void* r = next_row();
  if (q8_) {
    thread_local std::vector<float> row;  // [c_kv | k_pe] as the page stores it
    row.resize(size_t(row_width()));
    std::copy(c_kv, c_kv + C_, row.begin());
    std::copy(k_pe, k_pe + Dr_, row.begin() + C_);
    ops::latent_q8_store_row(device(), *q8_, static_cast<uint8_t*>(r), (size_ - 1) % page_tokens_, row.data());
    return;
  }
  if (dtype_ == DType::kBF16) {
    uint16_t* b = static_cast<uint16_t*>(r);
    for (int64_t i = 0; i < C_; ++i) b[i] = f32_to_bf16(c_kv[i]);
    for (int64_t i = 0; i < Dr_; ++i) b[C_ + i] = f32_to_bf16(k_pe[i]);
    return;
  }
  float* f = static_cast<float*>(r);
  std::memcpy(f, c_kv, size_t(C_) * sizeof(float));
  if (Dr_ > 0) std::memcpy(f + C_, k_pe, size_t(Dr_) * sizeof(float));
}

void MlaCache::append(const Tensor& c_kv, const Tensor& k_pe) {
  check_input(c_kv, "c_kv");
  check_input(k_pe, "k_pe");
  MYRIAD_REQUIRE(c_kv.ndim() == 2 && k_pe.ndim() == 2 && c_kv.shape()[1] == C_ && k_pe.shape()[1] == Dr_ &&
                     k_pe.shape()[0] == c_kv.shape()[0],
                 kShape, "mla cache: append c_kv ", shape_str(c_kv.shape()), " k_pe ", shape_str(k_pe.shape()),
                 ", expected [n, ", C_, "] and [n, ", Dr_, "]");
  const Tensor c = c_kv.contiguous(), k = k_pe.contiguous();
  for (int64_t t = 0; t < c.shape()[0]; ++t) append(c.data<float>() + t * C_, k.data<float>() + t * Dr_);
}

MlaCache MlaCache::clone() const {
  MlaCache c(C_, Dr_, page_tokens_, dtype_, means_.block());
  c.size_ = size_;
  c.means_ = means_;
  c.pages_.reserve(pages_.size());
  for (const Tensor& p : pages_) c.pages_.push_back(p.clone());
  return c;
}

MlaCache MlaCache::share_prefix(int64_t n) const {
  MYRIAD_REQUIRE(n >= 0 && n <= size_, kValue, "mla cache: a shared prefix of ", n, " tokens of ", size_);
  MlaCache c(C_, Dr_, page_tokens_, dtype_, means_.block());
  c.size_ = n;
  c.pages_.assign(pages_.begin(), pages_.begin() + n / page_tokens_);
  // A prefix ending inside a page: that page copied (copy on write: the new cache appends into it; its rows past n
  // are stale and never read, each append overwriting its row whole).
  if (n % page_tokens_ != 0) c.pages_.push_back(pages_[size_t(n / page_tokens_)].clone());
  // The means of the prefix: the complete blocks' are kept; a block the prefix ends inside is summed again from
  // its stored rows (exact for f32 caches; a bf16 or q8 cache's rows are its rounded ones).
  if (means_.block() > 0) c.means_ = means_.prefix(n, [&](int64_t t, float* out) { row_f32(t, out); });
  return c;
}

MlaCache MlaCache::from_raw_pages(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens, DType dtype,
                                  int64_t mean_block, int64_t size, std::vector<Tensor> pages,
                                  std::optional<BlockMeans> means) {
  MlaCache c(kv_lora_rank, rope_dim, page_tokens, dtype, mean_block);
  MYRIAD_REQUIRE(size >= 0 && int64_t(pages.size()) == (size + page_tokens - 1) / page_tokens, kFormat,
                 "mla cache: ", pages.size(), " pages for ", size, " tokens of ", page_tokens, " per page");
  const size_t bytes = page_bytes(kv_lora_rank, rope_dim, page_tokens, dtype);
  for (size_t p = 0; p < pages.size(); ++p) {
    MYRIAD_REQUIRE(pages[p].defined() && pages[p].device() == Device::kCPU && pages[p].nbytes() == bytes, kFormat,
                   "mla cache: page ", p, " holds ", pages[p].defined() ? pages[p].nbytes() : 0, " bytes, not ", bytes);
    pages[p] = pages[p].contiguous().clone();  // owned and writable (appends fill the last page)
  }
  c.pages_ = std::move(pages);
  c.size_ = size;
  if (mean_block > 0 && means) {
    c.set_block_means(std::move(*means));
  } else if (mean_block > 0) {  // the means of the rows as stored
    for (int64_t t = 0; t < size; ++t) {
      thread_local std::vector<float> r;
      r.resize(size_t(c.row_width()));
      c.row_f32(t, r.data());
      c.means_.append(r.data());
    }
  }
  return c;
}

void MlaCache::set_block_means(BlockMeans means) {
  MYRIAD_REQUIRE(means.block() == means_.block() && means.width() == means_.width() && means.rows() == size_, kValue,
                 "mla cache: block means of ", means.rows(), " rows in blocks of ", means.block(), " for a cache of ",
                 size_, " rows in blocks of ", means_.block());
  means_ = std::move(means);
}

void MlaCache::truncate(int64_t n) {
  MYRIAD_REQUIRE(n >= 0 && n <= size_, kValue, "mla cache: truncating ", size_, " tokens to ", n);
  if (n < size_) *this = share_prefix(n);
}

void MlaCache::clear() {
  pages_.clear();
  size_ = 0;
  if (means_.block() > 0) means_ = BlockMeans(means_.block(), row_width());
}

size_t MlaCache::page_bytes(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens, DType dtype) {
  if (dtype == DType::kQ8_0) return LatentQ8Layout(kv_lora_rank, rope_dim, page_tokens).bytes;
  return size_t(page_tokens) * size_t(kv_lora_rank + rope_dim) * (dtype == DType::kBF16 ? 2 : 4);
}

size_t MlaCache::bytes() const {
  return pages_.size() * page_bytes(C_, Dr_, page_tokens_, dtype_);
}

const float* MlaCache::page(int64_t p) const {
  MYRIAD_CHECK(dtype_ == DType::kF32, "mla cache: page() of a ", dtype_name(dtype_), " cache");
  return pages_[size_t(p)].data<float>();
}

const uint16_t* MlaCache::page_bf16(int64_t p) const {
  MYRIAD_CHECK(dtype_ == DType::kBF16, "mla cache: page_bf16() of a ", dtype_name(dtype_), " cache");
  return pages_[size_t(p)].data<uint16_t>();
}

const uint8_t* MlaCache::page_q8(int64_t p) const {
  MYRIAD_CHECK(q8_.has_value(), "mla cache: page_q8() of a ", dtype_name(dtype_), " cache");
  return pages_[size_t(p)].data<uint8_t>();
}

const LatentQ8Layout& MlaCache::q8_layout() const {
  MYRIAD_CHECK(q8_.has_value(), "mla cache: q8_layout() of a ", dtype_name(dtype_), " cache");
  return *q8_;
}

int64_t MlaCache::page_rows(int64_t p) const {
  return std::clamp<int64_t>(size_ - p * page_tokens_, 0, page_tokens_);
}

const float* MlaCache::row(int64_t t) const {
  MYRIAD_CHECK(t >= 0 && t < size_, "mla cache: token ", t, " of ", size_);
  return page(t / page_tokens_) + (t % page_tokens_) * row_width();
}

void MlaCache::row_f32(int64_t t, float* out) const {
  MYRIAD_CHECK(t >= 0 && t < size_, "mla cache: token ", t, " of ", size_);
  if (dtype_ == DType::kF32) {
    std::memcpy(out, row(t), size_t(row_width()) * sizeof(float));
    return;
  }
  if (q8_) {
    ops::latent_q8_load_rows(device(), *q8_, page_q8(t / page_tokens_), t % page_tokens_, 1, out, row_width());
    return;
  }
  const uint16_t* b = page_bf16(t / page_tokens_) + (t % page_tokens_) * row_width();
  for (int64_t i = 0; i < row_width(); ++i) out[i] = bf16_to_f32(b[i]);
}

void MlaCache::rows_f32(int64_t t0, int64_t n, float* out, int64_t ldo) const {
  MYRIAD_CHECK(t0 >= 0 && n >= 0 && t0 + n <= size_, "mla cache: rows [", t0, ", ", t0 + n, ") of ", size_);
  const int64_t W = row_width();
  for (int64_t t = t0; t < t0 + n;) {
    const int64_t p = t / page_tokens_, r = t % page_tokens_, m = std::min(page_tokens_ - r, t0 + n - t);
    float* o = out + (t - t0) * ldo;
    if (q8_) {
      ops::latent_q8_load_rows(device(), *q8_, page_q8(p), r, m, o, ldo);
    } else if (dtype_ == DType::kBF16) {
      ops::bf16_to_f32_rows(device(), o, ldo, page_bf16(p) + r * W, W, m, W);
    } else {
      for (int64_t i = 0; i < m; ++i) std::memcpy(o + i * ldo, page(p) + (r + i) * W, size_t(W) * sizeof(float));
    }
    t += m;
  }
}

}  // namespace myriad
