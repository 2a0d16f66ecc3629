// Sequence parallelism (issue 16, for issue 17's long contexts): rank r of the sp group holds tokens
// [r T, (r + 1) T) of every sequence and runs the model on them side by side with the others. The model reaches
// the other shards only through the sequence-context seam (model/sequence_context.h):
//   - KDA: each shard's affine map of the state (S_out = M S_in + S~, computed by the layer) is all-gathered, one
//     fixed-size message per layer, and rank r composes the maps of ranks < r in order into the state entering its
//     shard (plain summation would be wrong: the delta rule is not additive in the state). The short convs' halo
//     (the last W - 1 inputs of the shard before) comes from an all-gather of every shard's tail.
//   - MLA: the compressed latents [c_kv | k_pe] of every shard are all-gathered; rank r attends over those of
//     ranks <= r.
//   - Norms, FFNs, AttnRes: per token, nothing to exchange.
// Every exchange is an all-gather on the tape whose backward sums each block's gradient over the ranks and hands
// it to the block's owner, so the backward pass crosses the shards as the forward did. All ranks run the same
// layers in the same order (the exchanges are collectives).
#pragma once

#include "dist/communicator.h"
#include "model/config.h"
#include "model/sequence_context.h"

namespace myriad {

// x [n, N] f32 host on every rank (the same n) -> [size() n, N], rank p's block at p n. Backward: the gradient of
// the whole summed over the ranks, each rank keeping its block's rows.
ag::Var all_gather_rows(const ag::Var& x, Communicator& comm);

class SequenceParallelContext final : public SequenceContext {
 public:
  // shard_tokens: T, the same on every rank of sp_group (rank order = token order).
  SequenceParallelContext(Communicator& sp_group, const ModelConfig& config, int64_t shard_tokens);
  int64_t token_offset() const override { return int64_t(comm_.rank()) * T_; }
  ag::Var kda_conv_state_in(int64_t layer, int which, const ag::Var& inputs) override;
  ag::Var kda_state_in(int64_t) override { return ag::Var(); }
  bool wants_kda_shard_states() const override { return false; }
  void kda_shard_done(int64_t, const std::array<ag::Var, 3>&, const ag::Var&) override {}
  bool kda_composes_states() const override { return comm_.size() > 1; }
  ag::Var kda_compose_state(int64_t layer, const ag::Var& transition, const ag::Var& offset) override;
  ag::Var mla_latents(int64_t layer, const ag::Var& rows) override;

 private:
  Communicator& comm_;
  int64_t T_, W_, H_, K_;
};

}  // namespace myriad
