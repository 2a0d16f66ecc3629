// The gradient-ready seam (docs/design.md §4, issue 16): the third way parallelism reaches the model from outside,
// beside MoE dispatch and the sequence context. During a backward pass the model tells a listener, layer by layer, when
// a layer's weights (every tensor named "model.layers.<l>.") have received this backward's last contribution, so
// a data-parallel trainer can start reducing them while the layers below are still differentiated
// (dist/gradient_sync.h). The model knows nothing of ranks: it only places one tape marker (ag::Tape::on_backward)
// before each layer's forward; the backward reaches it after every node of that layer and of the layers above.
// Weights outside the layers (embeddings, the final norm, the head) are complete only when the backward ends.
#pragma once

#include <cstdint>

namespace myriad {

class GradientReadyListener {
 public:
  virtual ~GradientReadyListener() = default;
  // Called from inside the backward, in decreasing layer order, once per layer per backward.
  virtual void layer_ready(int64_t layer) = 0;
};

}  // namespace myriad
