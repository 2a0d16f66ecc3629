// Data-parallel gradients (issue 16): after a step's backward passes, every rank's gradients are summed over
// the ranks that hold the same tensor, so every replica of a tensor takes the same optimizer step:
//   dense tensors (replicated on every rank): summed over the world;
//   routed experts (replicated over dp and sp, split over ep): summed over their replicas (the ep all-to-all
//   already brought every token copy of the rank's ep group to its experts in the backward).
// The sums run over flat buckets (tensors packed in order up to bucket_bytes, one all-reduce each) so a model of
// thousands of tensors costs a few large messages, not thousands of small ones. Each rank seeds its backward with
// 1 / (the step's sequences over all ranks), so the sum is the step's mean gradient.
//
// Overlapped with the backward (the default in the trainer): before the step's last backward, begin_overlap();
// the model's gradient-ready markers (model/gradient_ready.h, ForwardOptions::gradient_ready = this) call
// layer_ready(l) as soon as layer l is differentiated, which starts that layer's non-blocking all-reduces while
// the layers below are still being differentiated; progress() (called between tape nodes through
// ag::BackwardProgressScope) moves them on, as MPI progresses only inside its calls; all_reduce() then reduces
// what is left (embeddings, final norm, head) and waits for the rest. A layer first exchanges which of its
// tensors have a gradient on some rank (an expert no token reached here may have one elsewhere), then its
// buckets; the two kinds run on communicators of their own (duplicates of world / expert replicas), so each
// kind starts in the same order on every rank whatever the timing. With 2 ranks the sums are the blocking
// path's bit for bit (a + b rounds the same either way); with more, MPI may pick another reduction order for
// other message sizes (float rounding).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dist/parallel_dims.h"
#include "model/gradient_ready.h"
#include "model/weights.h"

namespace myriad {

class GradientSync final : public GradientReadyListener {
 public:
  // The trainable tensors of `weights` (a rank's shard under ep); groups must outlive this object. Collective
  // (duplicates the communicators): every rank constructs it at the same point.
  GradientSync(const ModelConfig& config, ModelWeights& weights, ProcessGroups& groups,
               int64_t bucket_bytes = int64_t(32) << 20);
  ~GradientSync() override;
  // Sums the gradients as above. A tensor with no gradient on one rank (an expert no token reached there) but
  // one on another gets a zero buffer first; one with none anywhere keeps none. After begin_overlap(): finishes
  // the overlapped reduction.
  void all_reduce();
  // The next backward pass is the step's last: its layer markers start the layers' reductions.
  void begin_overlap();
  void layer_ready(int64_t layer) override;
  void progress();  // tests the reductions in flight now and then (cheap when there are none)
  // The global L2 norm of the (reduced) gradients: the dense tensors' squares (equal on every rank) plus the
  // experts' summed over the ep group. Infinite or NaN when any gradient is.
  double grad_norm() const;
  // Time in all_reduce(): what the step waited for (with overlap, what the backward did not hide).
  double seconds() const { return seconds_; }
  // Time spent inside the backward on the overlapped reductions (packing, starting, testing).
  double overlapped_seconds() const { return overlapped_seconds_; }

 private:
  // The tensors of one layer (or of none: layer -1) reduced over one communicator.
  struct Unit {
    int64_t layer = -1;
    bool experts = false;
    std::vector<ag::Var> vars;
  };
  struct InFlight;
  void reduce_group(const std::vector<ag::Var>& vars, Communicator& comm);
  void start_unit(size_t unit);
  void poll();
  // The tensors of `vars` with a gradient on some rank (has, MAX-reduced; missing ones get zeros here) packed in
  // order into buckets of at most bucket_floats_ floats; a larger tensor is a bucket of its own, reduced in place.
  // Both the blocking and the overlapped reductions use it, so they sum the same buckets.
  std::vector<std::vector<const ag::Var*>> plan_buckets(const std::vector<ag::Var>& vars,
                                                        const std::vector<int32_t>& has) const;
  bool in_place(const std::vector<const ag::Var*>& bucket) const;
  void start_buckets(InFlight& f);
  void finish_buckets(InFlight& f);
  Communicator& data_comm(const Unit& u) const;
  Communicator& flags_comm(const Unit& u) const;

  std::vector<ag::Var> dense_, experts_;
  std::vector<Unit> units_;                       // per layer: dense then experts; then the rest
  std::vector<std::vector<size_t>> layer_units_;  // layer -> its units
  std::vector<char> started_;                     // per unit, this step
  std::deque<InFlight> flight_;
  bool overlapping_ = false;
  ProcessGroups& groups_;
  std::unique_ptr<Communicator> dense_flags_, dense_data_, expert_flags_, expert_data_;
  int64_t bucket_floats_;
  std::vector<float> bucket_;
  double seconds_ = 0, overlapped_seconds_ = 0;
  std::chrono::steady_clock::time_point last_poll_{};
};

}  // namespace myriad
