#include "model/moe_dispatch.h"

#include "autograd/functions.h"
#include "core/error.h"

namespace myriad {

ExpertBatch LocalMoeDispatcher::dispatch(const ag::Var& z, const ExpertGroups& groups, const ag::Var& weights) const {
  MYRIAD_REQUIRE(z.value().ndim() == 2 && weights.value().ndim() == 2 && z.shape()[0] == weights.shape()[0], kShape,
                 "moe dispatch: token rows ", shape_str(z.shape()), " and weights ", shape_str(weights.shape()),
                 " must be [T, L] and [T, k]");
  ExpertBatch b;
  b.offsets = groups.start;
  b.first_expert = 0;
  b.rows = gather_copies(b, z, groups, weights);  // [served, L]
  return b;
}

ag::Var gather_copies(ExpertBatch& b, const ag::Var& z, const ExpertGroups& groups, const ag::Var& weights) {
  const int64_t served = groups.served(), T = weights.shape()[0], k = weights.shape()[1];
  b.copy_token = Tensor::from_vector(groups.copy_token, {served});
  const Tensor copy_slot = Tensor::from_vector(groups.copy_slot, {served});
  b.copy_weight = ag::reshape(ag::gather_rows(ag::reshape(weights, {T * k, 1}), copy_slot), {served});
  return ag::gather_rows(z, b.copy_token);
}

ag::Var LocalMoeDispatcher::combine(const ag::Var& expert_out, const ExpertBatch& batch, int64_t tokens) const {
  MYRIAD_REQUIRE(expert_out.value().ndim() == 2 && expert_out.shape()[0] == batch.copy_token.numel(), kShape,
                 "moe combine: expert outputs ", shape_str(expert_out.shape()), " for ", batch.copy_token.numel(),
                 " dispatched copies");
  return ag::scatter_add_rows(tokens, expert_out, batch.copy_token, batch.copy_weight);
}

const MoeDispatcher& local_moe_dispatcher() {
  static const LocalMoeDispatcher local;
  return local;
}

}  // namespace myriad
