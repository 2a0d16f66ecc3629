// The MoE dispatch seam (docs/design.md §4): between the routing of a MoE layer (model/routing.h: which expert each
// token copy goes to) and its experts. dispatch() turns the token rows and the copies grouped by expert into the rows
// each LOCAL expert serves, sorted by expert; the model runs its local experts on them (one grouped op); combine()
// returns each copy's output to its token, weighted by its mixture weight, summed over the token's copies.
//
// The model calls this interface and knows nothing of ranks. LocalMoeDispatcher (every expert in this process)
// is a gather and a weighted scatter-add; under expert parallelism an implementation owns a slice of the experts
// and exchanges the copies with an all-to-all inside dispatch and combine (forward and, through the tape, their
// backward), without a change to the model. Both the training forward (Transformer) and the inference model
// (InferenceModel, without the tape) dispatch through it.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/tape.h"
#include "core/tensor.h"
#include "model/routing.h"

namespace myriad {

// The copies this process's experts serve, and what combine needs to send their outputs back.
struct ExpertBatch {
  ag::Var rows;                  // [copies, L]: the copies of local expert i are rows [offsets[i], offsets[i + 1])
  std::vector<int64_t> offsets;  // [local experts + 1]
  int64_t first_expert = 0;      // the global id of local expert 0
  // For the local dispatcher's combine: the token of each copy [copies] (I32) and its mixture weight [copies].
  Tensor copy_token;
  ag::Var copy_weight;
  // For a dispatcher that exchanges copies between processes (dist/expert_parallel.h): the rows sent to and
  // received from each rank, and for each received row in arrival order its row in `rows`.
  std::vector<int64_t> sent_rows, received_rows;
  Tensor to_source_order;
  // Row boundaries inside the experts' ranges where their products split (each source rank's copies on their
  // own: a row's result then does not depend on what other ranks sent; ops/kernels.h GroupedGluShape).
  std::vector<int64_t> row_cuts;
};

class MoeDispatcher {
 public:
  virtual ~MoeDispatcher() = default;
  // The experts this process runs: [first, first + count) of num_experts.
  struct Range {
    int64_t first = 0, count = 0;
  };
  virtual Range local_experts(int64_t num_experts) const = 0;
  // z [T, L]: the token rows entering the experts; groups: the layer's copies grouped by expert (routing.h);
  // weights [T, k]: each copy's mixture weight (slot t * k + j).
  virtual ExpertBatch dispatch(const ag::Var& z, const ExpertGroups& groups, const ag::Var& weights) const = 0;
  // expert_out [copies, L], in the batch's row order -> [tokens, L]: sum over each token's copies of weight x row.
  virtual ag::Var combine(const ag::Var& expert_out, const ExpertBatch& batch, int64_t tokens) const = 0;
};

// Every expert in this process.
class LocalMoeDispatcher final : public MoeDispatcher {
 public:
  Range local_experts(int64_t num_experts) const override { return {0, num_experts}; }
  ExpertBatch dispatch(const ag::Var& z, const ExpertGroups& groups, const ag::Var& weights) const override;
  ag::Var combine(const ag::Var& expert_out, const ExpertBatch& batch, int64_t tokens) const override;
};

// What every dispatcher records of the copies it dispatches: each copy's token (batch.copy_token) and mixture
// weight (batch.copy_weight, on the tape), in the groups' order; returns the copies' rows of z, grouped by expert.
ag::Var gather_copies(ExpertBatch& batch, const ag::Var& z, const ExpertGroups& groups, const ag::Var& weights);

// The dispatcher a model uses when none is given.
const MoeDispatcher& local_moe_dispatcher();

}  // namespace myriad
