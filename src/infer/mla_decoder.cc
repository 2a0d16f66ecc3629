// Gated MLA decoding in the absorbed form (infer/mla_decoder.h).
#include "infer/mla_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "core/parallel.h"
#include "core/phase_profile.h"
#include "infer/decode_weights.h"
#include "model/constants.h"
#include "model/mla_module.h"
#include "model/rope.h"
#include "ops/fast_math.h"
#include "ops/kernels.h"
#include "ops/serial_blas.h"

namespace myriad {

namespace {

constexpr int64_t kQueryTile = 64;  // prefill: query rows per task

// A score row's softmax over the keys of `ranges` only (block-sparse prefill on dense tiles): probabilities there,
// zero in every other column of [0, width).
void masked_softmax_row(float* sr, std::span<const KeyRange> ranges, int64_t width) {
  float mx = -std::numeric_limits<float>::infinity();
  for (const KeyRange& r : ranges)
    for (int64_t j = r.begin; j < r.end; ++j) mx = std::max(mx, sr[j]);
  float sum = 0.0f;
  int64_t prev = 0;
  for (const KeyRange& r : ranges) {
    std::fill(sr + prev, sr + r.begin, 0.0f);
#pragma omp simd reduction(+ : sum)
    for (int64_t j = r.begin; j < r.end; ++j) {
      sr[j] = fast_exp(sr[j] - mx);
      sum += sr[j];
    }
    prev = r.end;
  }
  std::fill(sr + prev, sr + width, 0.0f);
  const float inv = 1.0f / sum;
  for (const KeyRange& r : ranges)
    for (int64_t j = r.begin; j < r.end; ++j) sr[j] *= inv;
}
// step: multiply-adds per thread below which the cache is not split (a fork/join costs a few microseconds).
constexpr int64_t kStepWorkPerThread = int64_t(1) << 18;
constexpr int64_t kSpanTokens = 256;  // step: cached tokens per online-softmax update

Tensor weight(const DecodeWeights& w, const std::string& name, const Shape& shape) {
  const Tensor& t = w.tensor(name);
  MYRIAD_REQUIRE(t.shape() == shape, kShape, "mla decoder: ", name, " is ", shape_str(t.shape()), ", the config needs ",
                 shape_str(shape));
  return t;
}

LinearWeight linear_weight(const DecodeWeights& w, const std::string& name, int64_t rows, int64_t cols) {
  const LinearWeight& l = w.linear(name);
  MYRIAD_REQUIRE(l.rows() == rows && l.cols() == cols, kShape, "mla decoder: ", name, " is [", l.rows(), ", ", l.cols(),
                 "], the config needs [", rows, ", ", cols, "]");
  return l;
}

void check_input(const Tensor& x, const char* what) {
  MYRIAD_REQUIRE(x.defined() && x.device() == Device::kCPU && x.dtype() == DType::kF32, kValue, "mla decoder: ", what,
                 " must be a defined f32 cpu tensor");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// MlaDecoder

MlaDecoder::MlaDecoder(const ModelConfig& c, const ModelWeights& w, int64_t layer)
    : MlaDecoder(c, DecodeWeights::from_model(w), layer) {}

MlaDecoder::MlaDecoder(const ModelConfig& c, std::shared_ptr<const DecodeWeights> weights, int64_t layer)
    : layer_(layer), config_(c), weights_(std::move(weights)) {
  MYRIAD_REQUIRE(layer >= 0 && layer < c.num_hidden_layers, kValue, "mla decoder: layer ", layer, " outside [0, ",
                 c.num_hidden_layers, ")");
  MYRIAD_REQUIRE(c.mixer(layer) == Mixer::kMla, kValue, "mla decoder: layer ", layer, " is a ",
                 mixer_name(c.mixer(layer)), " layer, not MLA");
  const DecodeWeights& w = *weights_;
  D_ = c.hidden_size;
  H_ = c.num_attention_heads;
  Dn_ = c.qk_nope_head_dim;
  Dr_ = c.qk_rope_head_dim;
  Dv_ = c.v_head_dim;
  C_ = c.kv_lora_rank;
  Dq_ = Dn_ + Dr_;
  gate_ = c.mla_use_output_gate;
  rope_ = !c.mla_use_nope && Dr_ > 0;
  rope_theta_ = c.rope_theta;
  rope_interleave_ = c.rope_interleave;
  const std::string a = "model.layers." + std::to_string(layer) + ".self_attn.";
  if (c.q_lora_rank) {
    const int64_t Cq = *c.q_lora_rank;
    w_qa_ = linear_weight(w, a + "q_a_proj.weight", Cq, D_);
    w_qa_norm_ = weight(w, a + "q_a_layernorm.weight", {Cq});
    w_qb_ = linear_weight(w, a + "q_b_proj.weight", H_ * Dq_, Cq);
  } else {
    w_q_ = linear_weight(w, a + "q_proj.weight", H_ * Dq_, D_);
  }
  w_kva_ = linear_weight(w, a + "kv_a_proj_with_mqa.weight", C_ + Dr_, D_);
  w_kv_norm_ = weight(w, a + "kv_a_layernorm.weight", {C_});
  // The absorbed form multiplies by W_uk / W_uv per head inside the attention, so kv_b_proj is needed as f32;
  // a quantized one is dequantized here (it is [H (Dn + Dv), C]: small next to the experts).
  const LinearWeight& kvb_w = linear_weight(w, a + "kv_b_proj.weight", H_ * (Dn_ + Dv_), C_);
  const Tensor kvb =
      (kvb_w.is_quantized() ? dequantize(kvb_w.quant_matrix()) : kvb_w.dense_weight()).view({H_, Dn_ + Dv_, C_});
  w_uk_ = kvb.slice(1, 0, Dn_).contiguous();
  w_uv_ = kvb.slice(1, Dn_, Dn_ + Dv_).contiguous();
  w_uk_t_ = w_uk_.transpose(1, 2).contiguous();
  if (gate_) w_g_ = linear_weight(w, a + "g_proj.weight", H_ * Dv_, D_);
  w_o_ = linear_weight(w, a + "o_proj.weight", D_, H_ * Dv_);

  scale_ = mla_score_scale(c);  // the training forward's scale, from one place
  sparse_ = c.mla_sparse_attention;
  if (rope_) {
    MYRIAD_REQUIRE(Dr_ % 2 == 0, kConfig, "mla decoder: qk_rope_head_dim ", Dr_, " must be even for RoPE");
    yarn_ = mla_yarn_params(c);
  }
}

MlaCache MlaDecoder::make_cache(int64_t page_tokens, DType dtype) const {
  return MlaCache(C_, Dr_, page_tokens, dtype, sparse_ ? sparse_->block_size : 0);
}

void MlaDecoder::check_cache(const MlaCache& cache) const {
  MYRIAD_REQUIRE(cache.kv_lora_rank() == C_ && cache.rope_dim() == Dr_, kShape, "mla decoder: cache rows are [",
                 cache.kv_lora_rank(), " | ", cache.rope_dim(), "], layer ", layer_, " needs [", C_, " | ", Dr_, "]");
  // Sparse layers score the cache's block means; dense ones read every row (and ignore any means).
  MYRIAD_REQUIRE(!sparse_ || cache.mean_block() == sparse_->block_size, kValue,
                 "mla decoder: the cache keeps block means of ", cache.mean_block(), " rows, layer ", layer_, " needs ",
                 sparse_ ? sparse_->block_size : 0,
                 " (mla_sparse_attention's block_size): make it with MlaCache::for_config");
}

void MlaDecoder::attend_sparse(const float* q, int64_t t, const MlaCache& cache, float* attn) const {
  const SparseMlaConfig& sp = *sparse_;
  const int64_t W = C_ + Dr_;
  const Device dev = weights_->device();
  thread_local std::vector<float> qbar, qcat, rows, S, o_lat;
  thread_local std::vector<int32_t> chosen;
  qbar.resize(size_t(W));
  chosen.resize(size_t(sp.top_k));
  // The choice, as training makes it (model/sparse_mla.h): the summed absorbed query against the block means.
  sparse_mla_query_sum(dev, q, 1, H_ * Dq_, H_, Dn_, Dr_, w_uk_.data<float>(), Dn_ * C_, C_, scale_, qbar.data());
  sparse_mla_choose(sp, t, qbar.data(), cache.block_means(), chosen.data());
  const std::vector<KeyRange> ranges = sparse_mla_ranges(sp, t, chosen.data());
  int64_t n = 0;
  for (const KeyRange& r : ranges) n += r.end - r.begin;
  rows.resize(size_t(n * W));
  for (int64_t i = 0; const KeyRange& r : ranges) {
    cache.rows_f32(r.begin, r.end - r.begin, rows.data() + i * W, W);
    i += r.end - r.begin;
  }
  // Every head's [q_lat | q_pe], scaled; the scores [H, n], an exact softmax per head, o_lat [H, C], out.
  qcat.resize(size_t(H_ * W));
  absorb_query(q, qcat.data(), W, 1);
  ops::scale(dev, qcat.data(), qcat.data(), scale_, H_ * W);
  S.resize(size_t(H_ * n));
  ops::gemm_skinny(dev, H_, n, W, qcat.data(), rows.data(), S.data(), n);
  for (int64_t h = 0; h < H_; ++h) {
    float* sr = S.data() + h * n;
    const float mx = ops::max_of(dev, sr, n);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += (sr[j] = std::exp(sr[j] - mx));
    ops::scale(dev, sr, sr, 1.0f / sum, n);
  }
  o_lat.resize(size_t(H_ * C_));
  ops::gemm_skinny_nn(dev, H_, C_, n, S.data(), n, rows.data(), W, o_lat.data(), C_, false);
  values_up(o_lat.data(), attn, 1);
}

void MlaDecoder::absorb_query(const float* q, float* qcat, int64_t ldq, int max_parts) const {
  const Device dev = weights_->device();
  const float* uk_t = w_uk_t_.data<float>();
  const int parts = int(std::min<int64_t>(max_parts, H_));
  parallel_region(parts, [&](int t, int nt) {
    for (int64_t h = part_begin(H_, t, nt); h < part_begin(H_, t + 1, nt); ++h) {
      ops::gemm_skinny(dev, 1, C_, Dn_, q + h * Dq_, uk_t + h * C_ * Dn_, qcat + h * ldq, ldq);  // [C, Dn] . q_nope
      std::copy(q + h * Dq_ + Dn_, q + (h + 1) * Dq_, qcat + h * ldq + C_);
    }
  });
}

void MlaDecoder::values_up(const float* o_lat, float* attn, int max_parts) const {
  const Device dev = weights_->device();
  const float* uv = w_uv_.data<float>();
  const int parts = int(std::min<int64_t>(max_parts, H_));
  parallel_region(parts, [&](int t, int nt) {
    for (int64_t h = part_begin(H_, t, nt); h < part_begin(H_, t + 1, nt); ++h)
      ops::gemm_skinny(dev, 1, Dv_, C_, o_lat + h * C_, uv + h * Dv_ * C_, attn + h * Dv_, H_ * Dv_);
  });
}

void MlaDecoder::attend_one(const float* q, const MlaCache& cache, float* attn, int max_parts) const {
  const int64_t W = C_ + Dr_;
  // The pages read: every page (dense), or the pages of a sparse query's chosen blocks and local keys, which are
  // whole pages when the block is a multiple of the page (the block boundaries are then page boundaries); other
  // sparse layouts gather their rows (attend_sparse).
  std::vector<int64_t> list;
  if (sparse_) {
    if (sparse_->block_size % cache.page_tokens() != 0) return attend_sparse(q, cache.size() - 1, cache, attn);
    thread_local std::vector<float> qbar;
    thread_local std::vector<int32_t> chosen;
    qbar.resize(size_t(W));
    chosen.resize(size_t(sparse_->top_k));
    sparse_mla_query_sum(weights_->device(), q, 1, H_ * Dq_, H_, Dn_, Dr_, w_uk_.data<float>(), Dn_ * C_, C_, scale_,
                         qbar.data());
    sparse_mla_choose(*sparse_, cache.size() - 1, qbar.data(), cache.block_means(), chosen.data());
    const int64_t P = cache.page_tokens();
    for (const KeyRange& r : sparse_mla_ranges(*sparse_, cache.size() - 1, chosen.data()))
      for (int64_t p = r.begin / P; p < (r.end + P - 1) / P; ++p) list.push_back(p);
  } else {
    list.resize(size_t(cache.num_pages()));
    std::iota(list.begin(), list.end(), int64_t(0));
  }
  // Every head's query row [q_lat | q_pe] (q_lat[h] = q_nope[h] W_uk[h]), so that one sgemm per page scores all
  // heads: the cached rows are read once per step, not once per head.
  std::vector<float> qcat(static_cast<size_t>(H_ * W));
  absorb_query(q, qcat.data(), W, max_parts);
  ops::scale(weights_->device(), qcat.data(), qcat.data(), scale_,
             H_ * W);  // the softmax scale, once rather than per page
  // A bf16 cache: with native bf16 dot products the queries are rounded to bf16 too and the page scores run
  // through vdpbf16ps (32 products an instruction, half the bytes read); otherwise each page is widened to f32 and
  // scored by the f32 kernel. Either way the values pass reads the page widened to f32.
  const bool bf16 = cache.dtype() == DType::kBF16, bf16_dot = bf16 && ops::bf16_dot_native(weights_->device());
  std::vector<uint16_t> qb;
  if (bf16_dot) {
    qb.resize(static_cast<size_t>(H_ * W));
    ops::f32_to_bf16_rows(weights_->device(), qb.data(), W, qcat.data(), W, H_, W);
  }
  // An int8 cache: the queries are quantized like a cached row (per head and group of 32), and both page products
  // run on the integer kernels (ops::latent_q8_scores / latent_q8_values) straight from the page.
  const bool q8 = cache.dtype() == DType::kQ8_0;
  LatentQ8Query qq;
  if (q8) ops::latent_q8_quantize_query(weights_->device(), cache.q8_layout(), qcat.data(), H_, W, qq);

  // Pages are split into contiguous ranges, one per part; each part runs an online softmax over its pages (running
  // max m, sum l and unnormalised o_lat per head), and the parts are merged at the end (flash-decoding).
  const int64_t pages = int64_t(list.size()), P = cache.page_tokens();
  const int64_t work = H_ * pages * P * (W + C_);  // multiply-adds
  const int64_t parts = std::clamp<int64_t>(std::min<int64_t>(work / kStepWorkPerThread, pages), 1, max_parts);
  std::vector<float> m(static_cast<size_t>(parts * H_)), l(static_cast<size_t>(parts * H_)),
      o(static_cast<size_t>(parts * H_ * C_));
  auto run_part = [&](int64_t part) {
    const int64_t p0 = pages * part / parts, p1 = pages * (part + 1) / parts;
    float* mp = m.data() + part * H_;
    float* lp = l.data() + part * H_;
    float* op = o.data() + part * H_ * C_;
    std::fill(mp, mp + H_, -std::numeric_limits<float>::infinity());
    std::fill(lp, lp + H_, 0.0f);
    std::fill(op, op + H_ * C_, 0.0f);
    // Spans of pages scored together, so that the online-softmax bookkeeping (max, rescaling, horizontal sums) runs
    // once per span per head rather than once per page: S [H, span tokens].
    const int64_t span = std::max<int64_t>(1, kSpanTokens / P), LS = span * P;
    thread_local std::vector<float> S, widened;  // widened: a span of bf16 pages as f32 [span * P, W]
    if (S.size() < size_t(H_ * LS)) S.resize(size_t(H_ * LS));
    if (bf16 && widened.size() < size_t(LS * W)) widened.resize(size_t(LS * W));
    for (int64_t s0 = p0; s0 < p1; s0 += span) {
      const int64_t s1 = std::min(p1, s0 + span);
      int64_t total = 0;
      // The per-page products are [H, W] x [W, n] and [H, n] x [n, C] for a handful of heads: the few-row kernels
      // read the page once per four heads straight from the cache, where sgemm would first copy (pack) it.
      // i: a position in the list, p = list[i] the page.
      auto page_f32 = [&](int64_t i) { return bf16 ? widened.data() + (i - s0) * P * W : cache.page(list[size_t(i)]); };
      for (int64_t i = s0; i < s1; ++i) {
        const int64_t p = list[size_t(i)], n = cache.page_rows(p), off = (i - s0) * P;
        if (q8) {
          ops::latent_q8_scores(weights_->device(), cache.q8_layout(), cache.page_q8(p), n, qq, S.data() + off, LS,
                                i + 1 < p1 ? cache.page_q8(list[size_t(i + 1)]) : nullptr);
        } else {
          if (bf16) ops::bf16_to_f32_rows(weights_->device(), widened.data() + off * W, W, cache.page_bf16(p), W, n, W);
          if (bf16_dot)
            ops::gemm_skinny_bf16(weights_->device(), H_, n, W, qb.data(), W, cache.page_bf16(p), W, S.data() + off,
                                  LS);
          else
            ops::gemm_skinny(weights_->device(), H_, n, W, qcat.data(), page_f32(i), S.data() + off,
                             LS);  // [H, n] scores
        }
        // Only the last page of the cache can be short, so the span's tokens are contiguous in S.
        total = off + n;
      }
      for (int64_t h = 0; h < H_; ++h) {
        float* sr = S.data() + h * LS;
        const float mx = std::max(mp[h], ops::max_of(weights_->device(), sr, total));
        const float corr = fast_exp(mp[h] - mx);  // ~0 on the first span (m = -inf), where l = o = 0
        lp[h] = lp[h] * corr + ops::exp_shifted_sum(weights_->device(), sr, total, mx);
        mp[h] = mx;
        if (corr != 1.0f) ops::scale(weights_->device(), op + h * C_, op + h * C_, corr, C_);
      }
      for (int64_t i = s0; i < s1; ++i) {
        const int64_t p = list[size_t(i)], n = cache.page_rows(p), off = (i - s0) * P;
        if (q8)
          ops::latent_q8_values(weights_->device(), cache.q8_layout(), cache.page_q8(p), n, S.data() + off, LS, H_, op,
                                C_);
        else
          ops::gemm_skinny_nn(weights_->device(), H_, C_, n, S.data() + off, LS, page_f32(i), W, op, C_,
                              true);  // o_lat += p c_kv
      }
    }
  };
  if (parts == 1) {
    run_part(0);
  } else {
    ops::ScopedSerialBlas single;
#pragma omp parallel for num_threads(int(parts)) schedule(static, 1)
    for (int64_t part = 0; part < parts; ++part) run_part(part);
  }
  // Merge the parts: o_lat[h] = sum_i e^(m_i - m) o_i / sum_i e^(m_i - m) l_i, m = max_i m_i.
  std::vector<float> o_lat(static_cast<size_t>(H_ * C_));
  for (int64_t h = 0; h < H_; ++h) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < parts; ++i) mx = std::max(mx, m[size_t(i * H_ + h)]);
    float den = 0.0f;
    float* oh = o_lat.data() + h * C_;
    std::fill(oh, oh + C_, 0.0f);
    for (int64_t i = 0; i < parts; ++i) {
      const float f = std::exp(m[size_t(i * H_ + h)] - mx);
      den += f * l[size_t(i * H_ + h)];
      ops::axpy(weights_->device(), oh, o.data() + (i * H_ + h) * C_, f, C_);
    }
    ops::scale(weights_->device(), oh, oh, 1.0f / den, C_);
  }
  values_up(o_lat.data(), attn, max_parts);  // out[h] = W_uv[h] o_lat[h]
}

void MlaDecoder::attend_chunk(const float* q, int64_t T, const MlaCache& cache, float* attn_p) const {
  const int64_t W = C_ + Dr_, HV = H_ * Dv_, HQ = H_ * Dq_;
  const int64_t N = cache.size(), base = N - T, P = cache.page_tokens();
  // Block-sparse: the chunk's queries' blocks (as attend_sparse chooses them) for the masked tiles below, or each
  // query over its own gathered keys (longer contexts; see SparsePrefill).
  std::vector<int32_t> chosen;  // [T, top_k]
  if (sparse_) {
    const int64_t mid = base + T / 2;
    const bool masked = sparse_prefill == SparsePrefill::kMasked ||
                        (sparse_prefill == SparsePrefill::kAuto &&
                         prefer_masked_sparse(double(mid + 1), double(sparse_mla_keys(*sparse_, mid))));
    if (!masked) {  // in parallel over the queries
      ops::ScopedSerialBlas single;
#pragma omp parallel for schedule(dynamic, 16) num_threads(num_threads())
      for (int64_t r = 0; r < T; ++r) attend_sparse(q + r * HQ, base + r, cache, attn_p + r * HV);
      return;
    }
    std::vector<float> qbar(static_cast<size_t>(T * W));
    sparse_mla_query_sum(weights_->device(), q, T, HQ, H_, Dn_, Dr_, w_uk_.data<float>(), Dn_ * C_, C_, scale_,
                         qbar.data());
    chosen.resize(size_t(T * sparse_->top_k));
#pragma omp parallel for schedule(dynamic, 64) num_threads(num_threads())
    for (int64_t r = 0; r < T; ++r)
      sparse_mla_choose(*sparse_, base + r, qbar.data() + r * W, cache.block_means(),
                        chosen.data() + r * sparse_->top_k);
  }
  const int64_t tiles = (T + kQueryTile - 1) / kQueryTile, tasks = H_ * tiles;
  // A bf16 or q8 cache is widened to f32 once per call ([N, W], the pages back to back), for the sgemm products
  // below (prefill is compute-bound: sgemm over f32 beats integer kernels that would re-read the codes per tile).
  std::vector<float> widened;
  if (cache.dtype() != DType::kF32) {
    widened.resize(static_cast<size_t>(N * W));
    for (int64_t p = 0; p < cache.num_pages(); ++p) {
      float* dst = widened.data() + p * P * W;
      if (cache.dtype() == DType::kBF16)
        ops::bf16_to_f32_rows(weights_->device(), dst, W, cache.page_bf16(p), W, cache.page_rows(p), W);
      else
        ops::latent_q8_load_rows(weights_->device(), cache.q8_layout(), cache.page_q8(p), 0, cache.page_rows(p), dst,
                                 W);
    }
  }
  auto page_f32 = [&](int64_t p) { return widened.empty() ? cache.page(p) : widened.data() + p * P * W; };
  const float* uk = w_uk_.data<float>();
  const float* uv = w_uv_.data<float>();
  const float scale = scale_;
  struct Scratch {
    std::vector<float> qcat, S, o_lat;
    std::vector<KeyRange> ranges;  // block-sparse: a query's key ranges
  };
  auto make_scratch = [&] {
    Scratch sc;
    if (sparse_) sc.ranges.resize(size_t(sparse_->top_k + 1));
    sc.qcat.resize(static_cast<size_t>(kQueryTile * W));
    sc.S.resize(static_cast<size_t>(kQueryTile * N));
    sc.o_lat.resize(static_cast<size_t>(kQueryTile * C_));
    return sc;
  };
  // One (head, query tile): rows i0 .. i0 + m - 1 of the chunk, i.e. cache tokens base + i0 ...
  auto run = [&](int64_t task, Scratch& sc) {
    const int64_t h = task / tiles, tile = tiles - 1 - task % tiles;  // largest tiles first
    const int64_t i0 = tile * kQueryTile, m = std::min(kQueryTile, T - i0), kend = base + i0 + m, ldS = N;
    float* qc = sc.qcat.data();
    float* S = sc.S.data();
    float* ol = sc.o_lat.data();
    // [q_lat | q_pe] rows: q_lat = q_nope W_uk[h]  ([m, Dn] x [Dn, C])
    const float* qh = q + i0 * HQ + h * Dq_;
    ops::gemm(weights_->device(), false, false, m, C_, Dn_, 1.0f, qh, HQ, uk + h * Dn_ * C_, C_, 0.0f, qc, W);
    for (int64_t r = 0; r < m; ++r) std::copy(qh + r * HQ + Dn_, qh + r * HQ + Dq_, qc + r * W + C_);
    // scores against every key the tile may see, one sgemm per page
    for (int64_t k0 = 0; k0 < kend; k0 += P) {
      const int64_t n = std::min(P, kend - k0);
      ops::gemm(weights_->device(), false, true, m, n, W, scale, qc, W, page_f32(k0 / P), W, 0.0f, S + k0, ldS);
    }
    // causal softmax: row r sees keys [0, base + i0 + r]; block-sparse, only its ranges of them
    for (int64_t r = 0; r < m; ++r) {
      float* sr = S + r * ldS;
      const int64_t n = base + i0 + r + 1;
      if (!chosen.empty()) {
        const int64_t nr = sparse_key_ranges(sparse_->block_size, sparse_->local_blocks(), sparse_->top_k,
                                             chosen.data() + (i0 + r) * sparse_->top_k, n - 1, sc.ranges.data());
        masked_softmax_row(sr, std::span<const KeyRange>(sc.ranges.data(), size_t(nr)), kend);
        continue;
      }
      float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, sr[j]);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < n; ++j) {
        sr[j] = fast_exp(sr[j] - mx);
        sum += sr[j];
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) sr[j] *= inv;
      std::fill(sr + n, sr + kend, 0.0f);
    }
    // o_lat = P c_kv  ([m, kend] x [kend, C]: the first C columns of the cached rows), page by page
    for (int64_t k0 = 0; k0 < kend; k0 += P) {
      const int64_t n = std::min(P, kend - k0);
      ops::gemm(weights_->device(), false, false, m, C_, n, 1.0f, S + k0, ldS, page_f32(k0 / P), W,
                k0 == 0 ? 0.0f : 1.0f, ol, C_);
    }
    // out[h] = o_lat W_uv[h]^T  ([m, C] x [C, Dv])
    ops::gemm(weights_->device(), false, true, m, Dv_, C_, 1.0f, ol, C_, uv + h * Dv_ * C_, C_, 0.0f,
              attn_p + i0 * HV + h * Dv_, HV);
  };
  const int nt = num_threads();
  if (tasks < 2 * nt || nt == 1) {
    Scratch sc = make_scratch();
    for (int64_t t = 0; t < tasks; ++t) run(t, sc);
  } else {
    ops::ScopedSerialBlas single;
#pragma omp parallel num_threads(nt)
    {
      Scratch sc = make_scratch();
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) run(t, sc);
    }
  }
}

// mla_module.h's execution without the tape, the absorbed form: the latent rows [normed c_kv | rotated k_pe] of
// the batch's tokens are appended to their sequences' caches, and each sequence's queries attend over its cache
// (attend_one / attend_chunk). Values are f32 tensors changed in place where a step allows.
struct MlaDecoder::Exec {
  using Value = Tensor;
  struct Weights {
    const LinearWeight *q_a_proj, *q_b_proj, *q_proj, *kv_a_proj, *g_proj, *o_proj;
    const Tensor *q_a_layernorm, *kv_a_layernorm;
  };
  using Latents = Tensor;  // [N, C + Dr]

  const MlaDecoder& d;
  std::span<const MlaSegment> segs;
  const std::vector<int64_t>& positions;  // of each row
  Tensor* attn_out;                       // receives the attention before the gate (may be null)

  Tensor linear(const Tensor& x, const LinearWeight* w) const {
    const PhaseScope phase("MLA products");
    return w->apply(x);
  }
  Tensor latent_norm(const Tensor& x, const Tensor* w) const {
    std::vector<float> rstd(static_cast<size_t>(x.size(0)));
    ops::rmsnorm_forward(d.weights_->device(), x.data<float>(), rstd.data(), x.data<float>(), w->data<float>(), nullptr,
                         x.size(0), x.size(1), kMlaLatentNormEps);
    return x;
  }
  Tensor mul(const Tensor& a, const Tensor& b) const {
    float* ap = a.data<float>();
    const float* bp = b.data<float>();
    for (int64_t i = 0; i < a.numel(); ++i) ap[i] *= bp[i];
    return a;
  }
  Tensor sigmoid(const Tensor& x) const {
    ops::unary_forward(d.weights_->device(), Unary::kSigmoid, x.data<float>(), x.data<float>(), x.numel());
    return x;
  }
  Tensor scale_queries(const Tensor& q) const {
    const int64_t N = q.size(0), HQ = q.size(1);
    float* p = q.data<float>();
    for (int64_t t = 0; t < N; ++t) {
      const float f = mla_query_scale(d.config_, positions[size_t(t)]);
      for (int64_t i = 0; i < HQ; ++i) p[t * HQ + i] *= f;
    }
    return q;
  }
  Tensor latents(const Tensor& rows, const Tensor* norm) const {
    const int64_t N = rows.size(0), W = d.C_ + d.Dr_;
    float* r = rows.data<float>();
    for (int64_t t = 0; t < N; ++t) {
      float rstd = 0.0f;  // in place: each output element reads only its own input element
      ops::rmsnorm_forward(d.weights_->device(), r + t * W, &rstd, r + t * W, norm->data<float>(), nullptr, 1, d.C_,
                           kMlaLatentNormEps);
    }
    return rows;
  }
  // Sequence-parallel prefill: every shard's latent rows (normed, rotated at their own positions) gathered; those
  // of the earlier shards are cached, in order, before this shard's own.
  void cache_earlier_shards(PrefillShards& shards, const float* mine, MlaCache& cache) const {
    const int64_t W = d.C_ + d.Dr_, S = shards.count(), me = shards.index();
    if (S == 1) return;
    std::vector<int64_t> counts(static_cast<size_t>(S));
    for (int64_t p = 0; p < S; ++p) counts[size_t(p)] = shards.rows(p) * W;
    std::vector<float> all(size_t(shards.offset(S) * W));
    shards.all_gather(mine, counts, all.data());
    for (int64_t t = 0; t < shards.offset(me); ++t) cache.append(all.data() + t * W, all.data() + t * W + d.C_);
  }
  Tensor attend(const Tensor& q_in, const Tensor& rows_in) const {
    const PhaseScope phase("MLA attention (RoPE, cache, scores, values)");
    const int64_t N = q_in.size(0), W = d.C_ + d.Dr_, HV = d.H_ * d.Dv_, HQ = d.H_ * d.Dq_;
    float* q = q_in.data<float>();
    float* rows = rows_in.data<float>();
    if (d.rope_) {
      const RopeTables rt = make_rope_tables(positions, d.Dr_, d.rope_theta_, d.yarn_ ? &*d.yarn_ : nullptr);
      const float* cs = rt.cos.data<float>();
      const float* sn = rt.sin.data<float>();
      const Device dev = d.weights_->device();
      const bool il = d.rope_interleave_;
      ops::rope_forward(dev, q, q, cs, sn, N, d.H_, d.Dq_, RopeLayout{d.Dn_, d.Dr_, il});  // q_pe of every head
      ops::rope_forward(dev, rows, rows, cs, sn, N, 1, W, RopeLayout{d.C_, d.Dr_, il});    // k_pe, shared by heads
    }
    Tensor attn = Tensor::empty({N, HV});
    float* attn_p = attn.data<float>();
    // Append every segment's rows, then attend. Decode batches (one row per segment) run the segments in parallel,
    // each on one thread; chunks run one after the other with the threads inside.
    bool all_single = segs.size() > 1;
    std::vector<int64_t> row0(segs.size());
    for (size_t i = 0, r = 0; i < segs.size(); r += size_t(segs[i].rows), ++i) {
      row0[i] = int64_t(r);
      if (segs[i].shards) cache_earlier_shards(*segs[i].shards, rows + int64_t(r) * W, *segs[i].cache);
      for (int64_t t = 0; t < segs[i].rows; ++t)
        segs[i].cache->append(rows + (int64_t(r) + t) * W, rows + (int64_t(r) + t) * W + d.C_);
      all_single = all_single && segs[i].rows == 1;
    }
    if (all_single) {
      ops::ScopedSerialBlas single;
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
      for (size_t i = 0; i < segs.size(); ++i) d.attend_one(q + row0[i] * HQ, *segs[i].cache, attn_p + row0[i] * HV, 1);
    } else {
      for (size_t i = 0; i < segs.size(); ++i) {
        if (segs[i].rows == 1)
          d.attend_one(q + row0[i] * HQ, *segs[i].cache, attn_p + row0[i] * HV, num_threads());
        else if (segs[i].rows > 1)
          d.attend_chunk(q + row0[i] * HQ, segs[i].rows, *segs[i].cache, attn_p + row0[i] * HV);
      }
    }
    if (attn_out) *attn_out = attn.clone();
    return attn;
  }
};

Tensor MlaDecoder::forward(const Tensor& x_in, std::span<const MlaSegment> segs, Tensor* attn_out) const {
  check_input(x_in, "x");
  MYRIAD_REQUIRE(x_in.ndim() == 2 && x_in.shape()[1] == D_, kShape, "mla decoder: input ", shape_str(x_in.shape()),
                 " must be [N, ", D_, "]");
  const Tensor x = x_in.contiguous();
  const int64_t N = x.shape()[0];
  int64_t total = 0;
  std::vector<int64_t> positions;
  positions.reserve(size_t(N));
  for (const MlaSegment& s : segs) {
    MYRIAD_REQUIRE(s.cache != nullptr && s.rows >= 0 && s.start_position >= 0, kValue,
                   "mla decoder: a segment needs a cache, rows >= 0 and a position >= 0");
    check_cache(*s.cache);
    for (int64_t i = 0; i < s.rows; ++i) positions.push_back(s.start_position + i);
    total += s.rows;
  }
  MYRIAD_REQUIRE(total == N, kShape, "mla decoder: the segments cover ", total, " rows, the input has ", N);
  for (const MlaSegment& s : segs)
    MYRIAD_REQUIRE(
        !s.shards || (segs.size() == 1 && s.cache->size() == 0 && s.rows == s.shards->rows(s.shards->index()) &&
                      s.start_position == s.shards->offset(s.shards->index())),
        kValue, "mla decoder: a prefill shard runs alone, on an empty cache, over its own rows at its offset");
  if (N == 0) {
    if (attn_out) *attn_out = Tensor::empty({0, H_ * Dv_});
    return Tensor::empty({0, D_});
  }
  const Exec::Weights w{&w_qa_, &w_qb_, &w_q_, &w_kva_, &w_g_, &w_o_, &w_qa_norm_, &w_kv_norm_};
  Exec exec{*this, segs, positions, attn_out};
  return mla_forward(exec, w, x, config_);
}

Tensor MlaDecoder::step(const Tensor& x_in, int64_t position, MlaCache& cache, Tensor* attn_out) const {
  check_input(x_in, "x");
  MYRIAD_REQUIRE(x_in.ndim() == 1 && x_in.shape()[0] == D_, kShape, "mla decoder: step input ", shape_str(x_in.shape()),
                 " must be [", D_, "]");
  const MlaSegment seg{&cache, 1, position};
  Tensor attn;
  Tensor out =
      forward(x_in.contiguous().view({1, D_}), std::span<const MlaSegment>(&seg, 1), attn_out ? &attn : nullptr);
  if (attn_out) *attn_out = attn.view({H_ * Dv_});
  return out.view({D_});
}

Tensor MlaDecoder::prefill(const Tensor& x_in, int64_t start_position, MlaCache& cache, Tensor* attn_out) const {
  check_input(x_in, "x");
  MYRIAD_REQUIRE(x_in.ndim() == 2 && x_in.shape()[1] == D_, kShape, "mla decoder: prefill input ",
                 shape_str(x_in.shape()), " must be [T, ", D_, "]");
  const MlaSegment seg{&cache, x_in.shape()[0], start_position};
  return forward(x_in, std::span<const MlaSegment>(&seg, 1), attn_out);
}

}  // namespace myriad
