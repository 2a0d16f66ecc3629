// KDA for inference: the mixer of one layer run over pieces of a sequence with its fixed-size state carried
// between them (DESIGN 1.2). The state is the three short convolutions' tails ([W-1, H*K] each) and the
// delta-rule state S ([H, K, V]): its size does not depend on how long the sequence is, so the cost per token
// does not grow with context. A one-token piece runs the recurrent form (decode); longer pieces the chunkwise
// form (prefill). Processing a sequence in pieces equals processing it whole (a test).
#pragma once

#include "model/config.h"
#include "model/weights.h"

namespace myriad {

struct KdaState {
  Tensor conv_q, conv_k, conv_v;  // [1, W-1, H*K]: the last W-1 projected inputs of each short conv
  Tensor S;                       // [1, H, K, V]
  int64_t tokens = 0;             // tokens processed so far
  size_t bytes() const;
};

class KdaDecoder {
 public:
  KdaDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t layer);
  KdaState make_state() const;  // a fresh sequence: zeros
  // x [T, D]: the layer's normed input for the next T tokens. Returns the mixer output [T, D] and advances st.
  Tensor forward(const Tensor& x, KdaState& st, int64_t chunk = 64) const;

 private:
  const ModelConfig& c_;
  const ModelWeights& w_;
  std::string prefix_;
  int64_t H_, K_, W_;
};

}  // namespace myriad
