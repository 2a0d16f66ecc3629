// Expert parallelism (issue 16): the MoE dispatcher of a rank that owns a contiguous slice of the routed experts
// (num_experts / ep of them: rank e of the ep group owns [e E/ep, (e+1) E/ep)). dispatch() sends every token
// copy to the rank of its expert and combine() brings each output back, both by an all-to-all over the ep group
// (forward, and on the tape backward: the all-to-all's gradient is the all-to-all with the counts swapped). The
// model is unchanged: it calls the MoeDispatcher interface (model/moe_dispatch.h) and runs its local experts
// on the rows it gets.
//
// Dispatch, per MoE layer call: the copies grouped by expert (routing.h) are contiguous per destination rank;
// one all-to-all of the per-expert counts (E/ep int64 per pair) tells each rank what it receives, one
// all-to-all of the rows (L floats each) moves them. The received rows arrive source-major (all of rank 0's
// copies, then rank 1's, ...; each block grouped by expert) and are permuted to expert-major, each local
// expert's rows contiguous (sources in rank order, each source's copies in its token order): with one rank this
// is exactly the local dispatcher's order. Combine undoes the permutation, sends the rows back, and each rank
// sums its tokens' copies weighted by their mixture weights (as the local dispatcher does).
//
// Every rank of the ep group must call dispatch and combine the same number of times, in the same order (they
// are collectives): the trainer runs the same number of sequences on every rank, and each forward reaches the
// same MoE layers. A rank with no copies for another still takes part (with empty blocks).
#pragma once

#include <functional>

#include "autograd/tape.h"
#include "dist/communicator.h"
#include "dist/parallel_dims.h"
#include "model/moe_dispatch.h"
#include "model/param_spec.h"
#include "model/weights.h"

namespace myriad {

// x [n, N] f32 (host): rows [sum send_rows]: block p goes to rank p; returns [sum recv_rows, N], block p from
// rank p. On the tape its backward sends the gradient rows back the same way.
ag::Var all_to_all_rows(const ag::Var& x, std::span<const int64_t> send_rows, std::span<const int64_t> recv_rows,
                        Communicator& comm);

class ExpertParallelDispatcher final : public MoeDispatcher {
 public:
  explicit ExpertParallelDispatcher(Communicator& ep_group) : comm_(ep_group) {}
  Range local_experts(int64_t num_experts) const override;
  ExpertBatch dispatch(const ag::Var& z, const ExpertGroups& groups, const ag::Var& weights) const override;
  ag::Var combine(const ag::Var& expert_out, const ExpertBatch& batch, int64_t tokens) const override;

 private:
  Communicator& comm_;
};

// Seconds this process has spent in the expert-parallel all-to-alls so far (forward and backward; the waiting
// for the slowest rank included): the communication share of an expert-parallel step.
double expert_exchange_seconds();

// Whether rank ep_rank of ep ranks holds a parameter: every one but the routed experts it does not own.
std::function<bool(const ParamSpec&)> expert_shard_filter(const ModelConfig& config, int ep_rank, int ep);

// One process of an expert-parallel inference job (`mpirun -np N myriad generate|eval --ep N`): every rank runs the
// same requests in lockstep (their dense layers replicated, the routed experts split N ways, the copies exchanged
// by the dispatcher), so a model whose experts do not fit one machine's memory runs over several; rank 0 reports.
// Logits equal one process's bit for bit (each source's copies multiplied as their own product).
struct ExpertParallelJob {
  Communicator* world = nullptr;
  ProcessGroups groups;
  std::unique_ptr<ExpertParallelDispatcher> dispatcher;
  bool root() const { return groups.is_root(); }
  // The tensors this rank holds, after checking --ep against the config (once, on every rank: one error).
  ParamFilter filter(const ModelConfig& config);
};
// Under mpirun: the world as dp 1 x ep (ep = the number of ranks, checked); null when not under mpirun and ep is 1.
std::unique_ptr<ExpertParallelJob> start_expert_parallel_job(int ep);

}  // namespace myriad
