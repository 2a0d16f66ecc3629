// The sequence-parallel seam of inference (issue 16): one prompt's prefill split into contiguous shards, one per
// process, run side by side. Shard s holds tokens [offset(s), offset(s) + rows(s)); the inference model's mixers
// reach the other shards only through all_gather (the model knows nothing of ranks), exactly as training's
// sequence-parallel context (model/sequence_context.h) does on the tape:
//   - KDA: the short convs' halo (the last W-1 inputs of the shard before) and each shard's affine map of the
//     state (S_out = M S_in + S~), composed in shard order into the state entering the shard;
//   - MLA: the cached latent rows of every shard, so a shard's queries see every earlier token.
// The LAST shard thus ends with exactly the state one process would have after the whole prompt (the composed KDA
// state run through its own tokens, its own conv tails, every latent row in its caches) and the prompt's last
// logits: it is the one that goes on decoding.
#pragma once

#include <cstdint>
#include <span>

namespace myriad {

class PrefillShards {
 public:
  virtual ~PrefillShards() = default;
  virtual int64_t count() const = 0;              // shards
  virtual int64_t index() const = 0;              // this process's shard
  virtual int64_t rows(int64_t shard) const = 0;  // tokens of shard `shard`
  int64_t offset(int64_t shard) const {           // tokens before shard `shard`
    int64_t o = 0;
    for (int64_t s = 0; s < shard; ++s) o += rows(s);
    return o;
  }
  // Every shard's floats in shard order into `all` (sum of counts floats): shard s sends counts[s] floats, this
  // shard `mine` (counts[index()] of them). Collective: every shard calls it, in the same order, with the same
  // counts.
  virtual void all_gather(const float* mine, std::span<const int64_t> counts, float* all) = 0;
};

}  // namespace myriad
