// A checkpoint holds every routed expert, a rank under expert parallelism some (issue 16): the full set is
// brought to the world root before it writes. A checkpoint written so is the single-process one, so a run
// resumes on any number of ranks (each loads what its filter keeps: resharding N -> M is a load).
//
// NOTE: the root holds every expert's tensors for the save (the weights, then the optimizer state). Fine up to
// models that fit one machine's memory; the flagship needs each rank writing its own shard with an index (the
// checkpoint layout already reads one: io/checkpoint.h), which is the next step (docs/distributed.md).
#pragma once

#include <string>
#include <vector>

#include "dist/parallel_dims.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace myriad {

// local: this rank's tensors named prefix + spec name, for each of `prefixes` ({""} for weights, {"m.", "v."}
// for AdamW's state):
// the dense ones and the experts it owns. Returns, on the world root, every dense local tensor plus every
// routed expert's tensor its owner has in its set, sorted by name; on the other ranks, nothing.
// Collective over the ep groups of d = 0, s = 0 (the other ranks return at once): one broadcast per expert
// tensor from its owner.
NamedTensors gather_experts_to_root(const ModelConfig& config, const NamedTensors& local,
                                    const std::vector<std::string>& prefixes, ProcessGroups& groups);

}  // namespace myriad
