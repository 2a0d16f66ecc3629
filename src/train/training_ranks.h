// The ranks of a training command (`myriad train`, `sft`): one process, or every rank of an mpirun job laid out
// as dp x ep x sp (dist/parallel_dims.h). One place for what each such command does before its first step:
// validate the layout on every rank (one message for the job), split the groups, check that every rank runs the
// same executable and model config, give each rank its slice of the routed experts and the all-to-all
// dispatcher under --ep, and let rank 0 alone write the run directory while the others wait for it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dist/communicator.h"
#include "dist/expert_parallel.h"
#include "dist/parallel_dims.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/trainer.h"

namespace myriad {

// How a training command runs across the ranks of an mpirun job: its --dp/--ep/--sp, --zero1 and --grad-sync.
struct ParallelTraining {
  ParallelDims dims;   // all 1: one process; under mpirun the product must be the number of ranks
  bool zero1 = false;  // ZeRO-1: the optimizer state sharded over the replicas (needs more than one rank)
  std::optional<bool> overlap_grad_sync;  // TrainerOptions::overlap_grad_sync (unset: auto)
  // kConfig for a flag the layout cannot honour (--zero1 in one process).
  void check() const;
  // The trainer's options these set (zero1, overlap_grad_sync; the groups come from the ranks).
  void apply(TrainerOptions& options) const;
};

struct TrainingRanks {
  SingleCommunicator single;  // the world of a plain (non-mpirun) process
  Communicator* world = nullptr;
  ProcessGroups groups;
  ParamFilter keep;  // this rank's tensors (its slice of the routed experts under --ep); empty: all of them
  std::unique_ptr<ExpertParallelDispatcher> dispatcher;  // under --ep
  bool root() const { return groups.is_root(); }
  bool distributed() const { return world->size() > 1; }
};

// The world of the command: every rank of the mpirun job (MPI initialised) when launched by mpirun or when dims
// ask for more than one rank, else this process alone. Then (check_on_all_ranks over *world for reading the
// inputs, so that a bad file is one message for the job, and) start_training_ranks.
std::unique_ptr<TrainingRanks> open_training_ranks(const ParallelDims& dims);

// On every rank: validates dims against the world and the config (and runs `extra_check`: a flag that needs more
// than one rank, a training config the layout cannot split), splits the groups, checks that every rank runs the
// same executable and `model_config_text`, and sets keep / dispatcher under --ep.
void start_training_ranks(TrainingRanks& ranks, const ParallelDims& dims, const ModelConfig& config,
                          const std::string& model_config_text, const std::function<void()>& extra_check = {});

// Rank 0 runs `prepare` (writes the run directory) while the others wait; when it throws, rank 0 reports its
// error and the whole job ends with it (one message, not one per rank). Returns on every rank once it succeeded.
void prepare_on_root(TrainingRanks& ranks, const std::function<void()>& prepare);

}  // namespace myriad
