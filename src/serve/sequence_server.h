// Sequence-parallel serving (issue 16): `mpirun -np N myriad serve --model DIR --sp N`. Every rank loads the whole
// model. Rank 0 is the server: HTTP, the engine, every sequence's state and every decode step. A prompt of at
// least --sp-min-tokens that starts from nothing (no prefix-cache hit) is prefilled by all N ranks side by side
// (model/prefill_shards.h), rank 0 holding the LAST shard: it ends with exactly the state one process would have
// after the whole prompt, and the prompt's last logits, and goes on decoding alone (the other shards' states are
// dropped). So a long prompt's time to first token falls by up to N (less the per-layer exchanges); decode is one
// process's (a token needs the whole state). The other running sequences wait while a long prompt is prefilled.
//
// Protocol, over the world communicator: rank 0 broadcasts [kPrefill, L, page_tokens, cache dtype] and the L prompt
// tokens; then every rank runs its shard's forward, the exchanges over a communicator in shard order (world rank r
// holds shard N - 1 - r). kStop ends the followers' loop. Followers wait for a command unwatched (an idle server
// is not a stopped rank); everything else is under the watchdog.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "dist/communicator.h"
#include "infer/inference_model.h"

namespace myriad {

class SequenceParallelServing {
 public:
  // Collective over `world` (every rank constructs it, in the same order relative to other collectives).
  explicit SequenceParallelServing(Communicator& world);
  SequenceParallelServing(const SequenceParallelServing&) = delete;
  SequenceParallelServing& operator=(const SequenceParallelServing&) = delete;

  // Rank 0: prefills the whole `prompt` into the fresh `seq` (its page size and cache dtype are the followers'
  // too) with every rank; returns the prompt's last logits [1, vocab]. Every shard needs at least the short
  // convolutions' window - 1 tokens (kValue otherwise, before anything is sent).
  Tensor prefill(const InferenceModel& model, SequenceState& seq, std::span<const int32_t> prompt);
  // Rank 0: ends the followers' loop (once; after the last prefill).
  void stop();
  // Ranks 1..: run rank 0's prefills until it stops.
  void follow(const InferenceModel& model);

  // The fewest tokens a prompt needs to be split over `ranks` shards for `config` (each shard >= W - 1 tokens).
  static int64_t min_tokens(const ModelConfig& config, int ranks);

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> shards_;  // world in shard order
  bool stopped_ = false;
};

}  // namespace myriad
