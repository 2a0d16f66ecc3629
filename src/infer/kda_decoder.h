// KDA for inference: the mixer of one layer run over pieces of a sequence with its fixed-size state
// (infer/kda_state.h) carried between them (docs/design.md §1.2). A one-token piece runs the recurrent form (decode);
// longer pieces the chunkwise form (prefill). Processing a sequence in pieces equals processing it whole (a test).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "infer/kda_state.h"
#include "model/config.h"
#include "model/kda_module.h"
#include "model/prefill_shards.h"
#include "model/weights.h"
#include "quant/linear_weight.h"

namespace myriad {

class DecodeWeights;

// Part of a batch for KdaDecoder::forward: `rows` consecutive input rows of one sequence, advancing `state`.
// With `shards` (a batch of one segment, a fresh state): one shard of a sequence-parallel prefill
// (model/prefill_shards.h); the conv halo and the state entering the shard come from the earlier shards.
// With `history`: the state as of after each of the segment's rows is appended to it (speculative verification,
// infer/speculative.h: a rejected draft rolls the state back to the last accepted row); such a segment runs the
// recurrent form row by row.
struct KdaSegment {
  KdaState* state = nullptr;
  int64_t rows = 0;
  PrefillShards* shards = nullptr;
  std::vector<KdaState>* history = nullptr;
};

// A KDA layer's weights for inference, resolved once (the members kda_module.h's execution reads).
struct KdaDecodeWeights {
  LinearWeight q_proj, k_proj, v_proj, f_a_proj, f_b_proj, b_proj, g_proj, o_proj;
  LinearWeight g_a_proj, g_b_proj;  // the low-rank output gate (use_full_rank_gate false) instead of g_proj
  Tensor q_conv, k_conv, v_conv;    // [H*K, W]
  Tensor A_log, dt_bias, o_norm;
};

// The mixer of one KDA layer for inference: model/kda_module.h's kda_forward run without the tape, on the
// kernels, over a batch of sequences each carrying its KdaState.
class KdaDecoder {
 public:
  KdaDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t layer);
  // Over inference weights (linear weights possibly block-quantized).
  KdaDecoder(const ModelConfig& config, std::shared_ptr<const DecodeWeights> weights, int64_t layer);
  KdaState make_state() const;  // a fresh sequence: zeros
  // x [T, D]: the layer's normed input for the next T tokens. Returns the mixer output [T, D] and advances st.
  Tensor forward(const Tensor& x, KdaState& st, int64_t chunk = 64) const;
  // A batch of sequences: x [N, D] holds the segments' rows in order. Projections, gates and the output run
  // once over all N rows; the short convs and the delta rule per segment (one-row segments: recurrent form).
  Tensor forward(const Tensor& x, std::span<const KdaSegment> segments, int64_t chunk = 64) const;

 private:
  std::shared_ptr<const DecodeWeights> w_;
  KdaDims dims_;
  int64_t D_;
  KdaDecodeWeights weights_;
};

}  // namespace myriad
