// The sequence-mixing seam (docs/design.md §4): where a layer that mixes tokens needs what came before its piece of the
// sequence. A forward sees a contiguous shard of a sequence, tokens [token_offset(), token_offset() + T); the
// per-token parts (norms, FFNs, AttnRes) need nothing else, the mixers ask this context for:
//   - KDA: the state S entering the shard and the short convolutions' last W-1 inputs before it (the conv
//     halo). Under sequence parallelism each shard's affine map S_out = M S_in + S~ is computed locally and
//     composed across ranks by an ordered scan (plain summation is wrong for the delta rule), the halo exchanged
//     between neighbours; a shard that follows another in the same process simply receives the states the
//     previous one left (shard_done).
//   - MLA: the compressed latents [c_kv | k_pe] (what MLA caches) of the earlier shards, gathered before this
//     shard's own.
// The model calls this interface and knows nothing of ranks. LocalSequenceContext is the whole sequence in one
// shard: no earlier tokens, zero states.
#pragma once

#include <array>
#include <cstdint>

#include "autograd/tape.h"

namespace myriad {

class SequenceContext {
 public:
  virtual ~SequenceContext() = default;

  // The position of this shard's first token in the whole sequence (RoPE angles start there).
  virtual int64_t token_offset() const = 0;

  // KDA layer `layer`, short conv `which` (0 q, 1 k, 2 v): the W-1 inputs [1, W-1, C] before this shard, or
  // undefined (zeros: the sequence starts here). inputs [T, C]: this shard's own conv inputs (what a context that
  // runs the shards side by side sends its successor).
  virtual ag::Var kda_conv_state_in(int64_t layer, int which, const ag::Var& inputs) = 0;
  // KDA layer `layer`: the state [1, H, K, V] entering this shard, or undefined (zeros).
  virtual ag::Var kda_state_in(int64_t layer) = 0;
  // Whether kda_shard_done wants what each shard leaves (building the conv tails on the tape costs a copy of the
  // conv inputs, so a context that continues nothing says no).
  virtual bool wants_kda_shard_states() const = 0;
  // What the shard left, for a shard that continues from here: the short convs' last W-1 inputs [1, W-1, C] (q, k,
  // v) and the final state [1, H, K, V], all on the tape, so a following shard's gradient flows back through them.
  virtual void kda_shard_done(int64_t layer, const std::array<ag::Var, 3>& conv_state_out,
                              const ag::Var& state_out) = 0;
  // Shards side by side (sequence parallelism): instead of kda_state_in, the layer gives the context its shard's
  // affine map of the state, S_out = transition S_in + offset (transition [1, H, K, K]: the final state from the
  // identity with zero values; offset [1, H, K, V]: from zeros), and gets back the state entering the shard
  // (composed from the earlier shards' maps in order; undefined: zeros). Both on the tape.
  virtual bool kda_composes_states() const { return false; }
  virtual ag::Var kda_compose_state(int64_t /*layer*/, const ag::Var& /*transition*/, const ag::Var& /*offset*/) {
    return ag::Var();
  }

  // MLA layer `layer`: the latent rows [T_before + T, C + Dr] of every token up to this shard's last, given this
  // shard's own rows [T, C + Dr] (before kv_a_layernorm and RoPE); T_before must be token_offset(). The local
  // context returns `rows`.
  virtual ag::Var mla_latents(int64_t layer, const ag::Var& rows) = 0;
};

// The whole sequence in this shard.
class LocalSequenceContext final : public SequenceContext {
 public:
  int64_t token_offset() const override { return 0; }
  ag::Var kda_conv_state_in(int64_t, int, const ag::Var&) override { return ag::Var(); }
  ag::Var kda_state_in(int64_t) override { return ag::Var(); }
  bool wants_kda_shard_states() const override { return false; }
  void kda_shard_done(int64_t, const std::array<ag::Var, 3>&, const ag::Var&) override {}
  ag::Var mla_latents(int64_t, const ag::Var& rows) override { return rows; }
};

}  // namespace myriad
