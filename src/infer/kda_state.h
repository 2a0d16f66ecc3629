// The state one KDA layer carries between the pieces of a sequence (docs/design.md §1.2): the three short convolutions'
// tails ([W-1, H*K] each) and the delta-rule state S ([H, K, V]). Its size does not depend on how long the
// sequence is, so the cost per token does not grow with context; infer/kda_decoder.h advances it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace myriad {

struct KdaState {
  Tensor conv_q, conv_k, conv_v;  // [1, W-1, H*K]: the last W-1 projected inputs of each short conv
  Tensor S;                       // [1, H, K, V]
  int64_t tokens = 0;             // tokens processed so far
  size_t bytes() const { return conv_q.nbytes() + conv_k.nbytes() + conv_v.nbytes() + S.nbytes(); }
  // A deep copy (prefix checkpoints, forks).
  KdaState clone() const { return KdaState{conv_q.clone(), conv_k.clone(), conv_v.clone(), S.clone(), tokens}; }
};

}  // namespace myriad
