// A training checkpoint written by a job whose ranks hold different tensors (expert parallelism: each rank of an
// ep group its slice of the routed experts; ZeRO-1: each rank its share of the optimizer state), in the sharded
// layout of run_checkpoint.h. One writer for every command that trains across ranks (train, sft, grpo).
#pragma once

#include <string>

#include "dist/optimizer_sharding.h"
#include "dist/parallel_dims.h"
#include "model/config.h"
#include "train/run_checkpoint.h"

namespace myriad {

// Collective over groups.world. `c` holds this rank's tensors (c.weights: what it keeps; c.optimizer_state: its
// AdamW state, under ZeRO-1 its share) and what rank 0 writes beside them (config, trainer state, tokenizer).
// Into the directory rank 0 stages, the ep group of d = 0, s = 0 (one copy of every expert) writes one model
// shard per ep rank (rank e its experts, rank 0 also every dense tensor); the optimizer state goes the same way,
// or under ZeRO-1 (`sharding` not null) one shard per rank. Rank 0 then writes the indexes (which shard holds
// each tensor follows from the layout) and commits. No rank ever holds more than its own share. Returns the
// checkpoint's directory on rank 0, an empty string on the others.
std::string save_sharded_run_checkpoint(const ProcessGroups& groups, const ModelConfig& config,
                                        const std::string& run_dir, int64_t step, const CheckpointContents& c,
                                        const OptimizerSharding* sharding, int64_t keep);

}  // namespace myriad
