// Sequence-parallel prefill over a communicator (issue 16): the inference seam of model/prefill_shards.h with the
// communicator's rank r holding shard r of the prompt. The shards are as even as possible (the first ones a token
// longer), so a prompt of L tokens costs each of N ranks L / N tokens of prefill, plus per layer one fixed-size
// gather for a KDA layer (the three conv halos and the [M | S~] maps) and one gather of the latent rows for an MLA
// layer (what MLA caches: C + Dr floats a token).
#pragma once

#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "model/prefill_shards.h"

namespace myriad {

class CommunicatorPrefillShards final : public PrefillShards {
 public:
  // tokens: the whole prompt's length (>= the number of ranks: every shard has a token).
  CommunicatorPrefillShards(Communicator& comm, int64_t tokens);
  int64_t count() const override { return int64_t(rows_.size()); }
  int64_t index() const override { return comm_.rank(); }
  int64_t rows(int64_t shard) const override { return rows_.at(size_t(shard)); }
  void all_gather(const float* mine, std::span<const int64_t> counts, float* all) override;

  // `tokens` split into `count` contiguous shards, the first tokens % count of them one token longer.
  static std::vector<int64_t> split(int64_t tokens, int64_t count);

 private:
  Communicator& comm_;
  std::vector<int64_t> rows_;
};

}  // namespace myriad
