// KDA for inference: the mixer of one layer run over pieces of a sequence with its fixed-size state carried
// between them (DESIGN 1.2). The state is the three short convolutions' tails ([W-1, H*K] each) and the
// delta-rule state S ([H, K, V]): its size does not depend on how long the sequence is, so the cost per token
// does not grow with context. A one-token piece runs the recurrent form (decode); longer pieces the chunkwise
// form (prefill). Processing a sequence in pieces equals processing it whole (a test).
#pragma once

#include <memory>
#include <span>

#include "model/config.h"
#include "model/weights.h"
#include "quant/linear_weight.h"

namespace myriad {

class DecodeWeights;

struct KdaState {
  Tensor conv_q, conv_k, conv_v;  // [1, W-1, H*K]: the last W-1 projected inputs of each short conv
  Tensor S;                       // [1, H, K, V]
  int64_t tokens = 0;             // tokens processed so far
  size_t bytes() const;
  KdaState clone() const;  // a deep copy (prefix checkpoints, forks)
};

// Part of a batch for KdaDecoder::forward: `rows` consecutive input rows of one sequence, advancing `state`.
struct KdaSegment {
  KdaState* state = nullptr;
  int64_t rows = 0;
};

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
  float rms_eps_, lower_bound_;
  int64_t H_, K_, W_, D_;
  LinearWeight q_proj_, k_proj_, v_proj_, f_a_, f_b_, b_proj_, g_proj_, o_proj_;
  Tensor conv_q_, conv_k_, conv_v_, a_log_, dt_bias_, o_norm_;  // convs as [H*K, W]
};

}  // namespace myriad
