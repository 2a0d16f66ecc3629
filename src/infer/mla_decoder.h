// Gated MLA decoding (docs/design.md §1.3) over a latent cache (infer/mla_cache.h), in the absorbed form.
//
// MlaDecoder: the absorbed form (DeepSeek-V2 §2.1.2 / the reference's impl "absorbed"). kv_b_proj [H(Dn+Dv), C]
// is split once into W_uk [H, Dn, C] (key half) and W_uv [H, Dv, C] (value half). Per head h and query t:
//   q_lat[h] = W_uk[h]^T q_nope[h]                                        (C wide)
//   s_j      = (q_lat[h] . c_kv_j + q_pe[h] . k_pe_j) * scale              for cached tokens j <= t
//   scale    = (Dn + Dr)^-1/2, times mscale(factor, mscale_all_dim)^2 when RoPE is on with YaRN (factor > 1),
//              exactly as Transformer::mla_mixer
//   p        = softmax_j(s);  o_lat[h] = sum_j p_j c_kv_j;  out[h] = W_uv[h] o_lat[h]   (Dv wide)
// then the output gate (attn * sigmoid(W_g x), when mla_use_output_gate) and o_proj. No per-head K or V is
// ever formed. The positions given to step/prefill only set the RoPE angles; causality is cache order (a query
// sees every cached token before it and itself), so for one sequence the position is normally cache.size().
//
// Threads and memory traffic:
//   - prefill runs (head, 64-query tile) tasks in parallel, each with sgemm (ops::gemm, single-threaded inside a
//     task; with fewer tasks than 2x threads the tasks run in turn with threaded sgemm). Working memory: one
//     [64, context] score block per task.
//   - step scores ALL heads against a page with one sgemm ([H, W] x [W, page]): in the absorbed form every head
//     reads the same cached rows (MQA-like), so the cache is read once per step instead of once per head (at
//     flagship scale, H = 96 and a 576-float row per token, reading it per head would make decode 96x more
//     memory-bound). Threads split the PAGES (flash-decoding: each part keeps a running max, sum and unnormalised
//     o_lat per head, merged at the end); small contexts run on one thread. Within a part, spans of 256 tokens are
//     scored before their softmax update (the max / rescale / sums run once per span per head, not per page).
//     Working memory: [H, span] per part. A q8 cache scores and sums on the int8 kernels of ops/latent_q8.h
//     (the queries quantized per head and group of 32 like the rows); bf16 and q8 caches are widened to f32 for
//     prefill.
// Inputs are f32 cpu tensors; weights of other dtypes are converted to f32 once, at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "infer/mla_cache.h"
#include "model/config.h"
#include "model/prefill_shards.h"
#include "model/sparse_mla.h"
#include "model/weights.h"
#include "ops/latent_q8.h"
#include "ops/rope_table.h"
#include "quant/linear_weight.h"

namespace myriad {

class DecodeWeights;

// Part of a batch for MlaDecoder::forward: `rows` consecutive input rows of one sequence, at positions
// start_position .., appended to `cache`.
// With `shards` (a batch of one segment, an empty cache): one shard of a sequence-parallel prefill
// (model/prefill_shards.h); the earlier shards' latent rows are cached before this one's.
struct MlaSegment {
  MlaCache* cache = nullptr;
  int64_t rows = 0;
  int64_t start_position = 0;
  PrefillShards* shards = nullptr;
};

class MlaDecoder {
 public:
  // `layer` (0-based) must be an MLA layer of `config`. The f32 weights are referenced (shared storage), not
  // copied, except kv_b_proj, which is split into W_uk / W_uv copies: build a new decoder after the weights change.
  MlaDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t layer);
  // The same over inference weights, whose linear weights may be block-quantized (used without dequantizing,
  // except kv_b_proj, which the absorbed form needs split per head in f32).
  MlaDecoder(const ModelConfig& config, std::shared_ptr<const DecodeWeights> weights, int64_t layer);

  // A cache shaped for this layer.
  MlaCache make_cache(int64_t page_tokens = MlaCache::kDefaultPageTokens, DType dtype = DType::kF32) const;

  // One token: x [D] is the normed input (input_layernorm applied). Appends its c_kv / k_pe to the cache, attends
  // over the whole cache, returns the mixer output [D] (o_proj applied). When attn is given it receives the
  // attention output before the gate and o_proj, [H * Dv].
  Tensor step(const Tensor& x, int64_t position, MlaCache& cache, Tensor* attn = nullptr) const;

  // A chunk of T tokens at positions start_position .. + T - 1: x [T, D]. Appends the chunk to the cache; token
  // i of the chunk sees the tokens cached before the chunk and chunk tokens 0..i. Returns [T, D]; attn (when
  // given) receives [T, H * Dv] before the gate and o_proj. Long prompts: call once per chunk.
  Tensor prefill(const Tensor& x, int64_t start_position, MlaCache& cache, Tensor* attn = nullptr) const;

  // A batch of sequences: x [N, D] holds the segments' rows in order. The projections and the output run once
  // over all N rows (the weights are read once per batch); the attention runs per segment over its own cache
  // (single-row segments in parallel, one per thread). Returns [N, D]; attn as in prefill.
  Tensor forward(const Tensor& x, std::span<const MlaSegment> segments, Tensor* attn = nullptr) const;

  // Block-sparse prefill, two ways: each query over its own keys gathered (dot products over the rows of its
  // ranges), or dense attention's sgemm tiles with every key outside the query's blocks masked (the same keys and
  // numbers up to f32 association; as many products as dense, but sgemm runs them many times faster per key).
  // kAuto: ops/kernels.h prefer_masked_sparse (the training kernel's rule) for the chunk's middle query. Tests set
  // one way to check both.
  enum class SparsePrefill { kAuto, kMasked, kGathered };
  SparsePrefill sparse_prefill = SparsePrefill::kAuto;

  const Tensor& w_uk() const { return w_uk_; }  // [H, Dn, C]
  const Tensor& w_uv() const { return w_uv_; }  // [H, Dv, C]
  float softmax_scale() const { return scale_; }
  int64_t layer() const { return layer_; }

 private:
  struct Exec;  // model/mla_module.h's execution over the latent caches (mla_decoder.cc)

  // The attention of one query q [H * Dq] (already in the cache) over the whole cache -> attn [H * Dv], splitting
  // the pages over at most max_parts threads; and of the last T cached tokens' queries q [T, H * Dq] -> [T, H Dv].
  void attend_one(const float* q, const MlaCache& cache, float* attn, int max_parts) const;
  void attend_chunk(const float* q, int64_t T, const MlaCache& cache, float* attn) const;
  // One query's absorption, every head: qcat[h] (row stride ldq) = [W_uk[h]^T q_nope[h] | q_pe[h]]; and the
  // values' up-projection attn[h] = W_uv[h] o_lat[h]. Each head's product streams its slice of kv_b_proj (as f32:
  // [Dn + Dv, C] per head, the largest read of an MLA decode step at real widths), the heads split over at most
  // max_parts threads.
  void absorb_query(const float* q, float* qcat, int64_t ldq, int max_parts) const;
  void values_up(const float* o_lat, float* attn, int max_parts) const;
  // Block-sparse MLA (model/sparse_mla.h): the query q [H * Dq] of cache token t over its chosen blocks and local
  // keys -> attn [H * Dv].
  void attend_sparse(const float* q, int64_t t, const MlaCache& cache, float* attn) const;
  void check_cache(const MlaCache& cache) const;

  int64_t layer_;
  ModelConfig config_;  // the switches mla_forward reads (q_lora_rank, mla_use_output_gate)
  int64_t D_, H_, Dn_, Dr_, Dv_, C_, Dq_;
  bool rope_ = false;
  bool rope_interleave_ = false;  // rope_interleave: pairs (2i, 2i + 1)
  bool gate_ = false;
  double rope_theta_ = 10000.0;
  std::optional<YarnParams> yarn_;         // RoPE with rope_scaling factor > 1 (as Transformer::mla_mixer)
  std::optional<SparseMlaConfig> sparse_;  // mla_sparse_attention
  float scale_ = 1.0f;
  std::shared_ptr<const DecodeWeights> weights_;
  LinearWeight w_qa_, w_qb_, w_q_;  // q_a_proj, q_b_proj; or q_proj without q_lora_rank
  Tensor w_qa_norm_;                // q_a_layernorm
  LinearWeight w_kva_;              // kv_a_proj_with_mqa [C + Dr, D]
  Tensor w_kv_norm_;                // kv_a_layernorm [C]
  Tensor w_uk_, w_uv_;              // [H, Dn, C], [H, Dv, C]
  Tensor w_uk_t_;                   // [H, C, Dn]: W_uk per head transposed, for the one-query absorption (rows read
                                    // in order, as the few-row kernel streams them)
  LinearWeight w_g_, w_o_;          // g_proj [H Dv, D] (gate only), o_proj [D, H Dv]
};

}  // namespace myriad
