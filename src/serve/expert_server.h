// Expert-parallel serving (issue 16): `mpirun -np N myriad serve --model DIR --ep N`. Rank 0 is the server: HTTP,
// the engine, every sequence's state and every dense layer, and 1/N of the routed experts; ranks 1.. hold only
// their 1/N of the experts (and the dense weights they load with them) and serve the token copies rank 0 sends
// them. So a model whose experts do not fit one machine's memory is served by several, and the logits are one
// process's bit for bit (each rank multiplies the copies it receives as one product, as one process would).
//
// Protocol, over the world communicator: before each forward (at its first MoE layer) rank 0 broadcasts
// kForward; every other rank then runs, for each MoE layer in order, the dispatch, its experts and the combine
// (InferenceModel::serve_remote_experts) opposite rank 0's. kStop ends the followers' loop. The followers wait for
// the next command unwatched (an idle server is not a stopped rank); everything else is under the watchdog.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "dist/expert_parallel.h"
#include "infer/inference_model.h"

namespace myriad {

// Rank 0's MoE dispatcher: the expert-parallel one, announcing each forward to the followers first.
class ExpertLeaderDispatcher final : public MoeDispatcher {
 public:
  // world: where the commands go; ep_group: the communicator the followers' dispatcher exchanges the copies over.
  ExpertLeaderDispatcher(Communicator& world, Communicator& ep_group, const ModelConfig& config);
  Range local_experts(int64_t num_experts) const override { return inner_.local_experts(num_experts); }
  ExpertBatch dispatch(const ag::Var& z, const ExpertGroups& groups, const ag::Var& weights) const override;
  ag::Var combine(const ag::Var& expert_out, const ExpertBatch& batch, int64_t tokens) const override {
    return inner_.combine(expert_out, batch, tokens);
  }
  // Ends the followers' loop (once; after the last forward).
  void stop();

 private:
  Communicator& world_;
  ExpertParallelDispatcher inner_;
  int64_t moe_layers_;
  mutable int64_t calls_ = 0;  // MoE layer calls so far (every forward makes moe_layers_ of them)
  bool stopped_ = false;
};

// Ranks 1..: serves rank 0's forwards until it sends kStop.
void run_expert_follower(const InferenceModel& model, const ExpertParallelDispatcher& dispatcher, Communicator& world);

}  // namespace myriad
