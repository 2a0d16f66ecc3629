// The routed experts of an MoE layer (docs/design.md §1.5) as one autograd op. Token copies arrive sorted by expert;
// expert e maps its rows [offsets[e], offsets[e+1]) of z_sorted through a GLU FFN:
//   y = glu(z w1_e^T, z w3_e^T) w2_e^T      (w1, w3 [F, L]: gate, up; w2 [L, F]: down; PyTorch's layout)
// One tape node replaces the 3 linear + 1 GLU + 1 slice nodes per expert of a loop over experts, and the work runs
// in the fused kernel ops::grouped_glu_forward / backward (src/ops/cpu/grouped_glu.cc for the threading). Routing,
// gather and the weighted scatter stay with the caller (Transformer::moe_ffn).
// Shape legend: C copies (served token x slot pairs, sorted by expert), L expert input/output width (the latent),
// F expert width, E experts.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/tape.h"
#include "ops/kernels.h"

namespace myriad::ag {

using myriad::GluKind;  // the GLU inside each expert (ops/kernels.h)
using myriad::GluParams;

// z_sorted [C, L]; offsets [E + 1] (offsets[0] = 0, non-decreasing, offsets[E] = C); w1[e], w3[e] [F, L] and
// w2[e] [L, F], one distinct Var per expert (the backward writes each expert's gradients from its own thread).
// Returns y_sorted [C, L]. Backward ACCUMULATES into dz_sorted and into dW1/dW3/dW2 of the experts that have rows
// (allocated on first use, as ag::linear does; an expert with no rows gets no gradient). The node keeps the GLU
// inputs g, u [C, F] and recomputes the GLU output in backward.
// cuts: sorted row boundaries inside the experts' ranges where an expert's rows are multiplied as separate
// products (ops/kernels.h GroupedGluShape), e.g. one piece per source rank under expert parallelism.
Var grouped_expert_glu(const Var& z_sorted, const std::vector<int64_t>& offsets, const std::vector<Var>& w1,
                       const std::vector<Var>& w3, const std::vector<Var>& w2, GluParams glu,
                       const std::vector<int64_t>& cuts = {});

}  // namespace myriad::ag
