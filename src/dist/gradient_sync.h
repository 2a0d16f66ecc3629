// Data-parallel gradients (issue 16): after a step's backward passes, every rank's gradients are summed over
// the ranks that hold the same tensor, so every replica of a tensor takes the same optimizer step:
//   dense tensors (replicated on every rank): summed over the world;
//   routed experts (replicated over dp and sp, split over ep): summed over their replicas (the ep all-to-all
//   already brought every token copy of the rank's ep group to its experts in the backward).
// The sums run over flat buckets (tensors packed in name order up to bucket_bytes, one all-reduce each) so a
// model of thousands of tensors costs a few large messages, not thousands of small ones. Each rank seeds its
// backward with 1 / (the step's sequences over all ranks), so the sum is the step's mean gradient.
//
// Leaves out: overlapping the all-reduces with the backward pass (the reduction follows it; see
// docs/distributed.md for the measured share of the step); ZeRO-1 (optimizer state stays replicated).
#pragma once

#include <string>
#include <vector>

#include "dist/parallel_dims.h"
#include "model/weights.h"

namespace myriad {

class GradientSync {
 public:
  // The trainable tensors of `weights` (a rank's shard under ep); groups must outlive this object.
  GradientSync(const ModelConfig& config, ModelWeights& weights, ProcessGroups& groups,
               int64_t bucket_bytes = int64_t(32) << 20);
  // Sums the gradients as above. A tensor with no gradient on one rank (an expert no token reached there) but
  // one on another gets a zero buffer first; one with none anywhere keeps none.
  void all_reduce();
  // The global L2 norm of the (reduced) gradients: the dense tensors' squares (equal on every rank) plus the
  // experts' summed over the ep group. Infinite or NaN when any gradient is.
  double grad_norm() const;
  double seconds() const { return seconds_; }  // time spent in all_reduce (communication and packing)

 private:
  void reduce_group(const std::vector<ag::Var>& vars, Communicator& comm);
  std::vector<ag::Var> dense_, experts_;
  ProcessGroups& groups_;
  int64_t bucket_floats_;
  std::vector<float> bucket_;
  double seconds_ = 0;
};

}  // namespace myriad
