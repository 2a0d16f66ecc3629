#include "train/training_ranks.h"

#include "dist/mpi_communicator.h"

namespace myriad {

void ParallelTraining::check() const {
  MYRIAD_REQUIRE(!zero1 || dims.distributed(), kConfig,
                 "--zero1 shards the optimizer state over the ranks of an mpirun job (--dp / --ep > 1)");
}

void ParallelTraining::apply(TrainerOptions& options) const {
  options.zero1 = zero1;
  options.overlap_grad_sync = overlap_grad_sync;
}

std::unique_ptr<TrainingRanks> open_training_ranks(const ParallelDims& dims) {
  auto r = std::make_unique<TrainingRanks>();
  r->world = dims.distributed() || launched_by_mpirun() ? &mpi_world() : &r->single;
  return r;
}

void start_training_ranks(TrainingRanks& ranks, const ParallelDims& dims, const ModelConfig& config,
                          const std::string& model_config_text, const std::function<void()>& extra_check) {
  Communicator& world = *ranks.world;
  check_on_all_ranks(world, [&] {
    validate_parallel_dims(dims, world.size(), config);
    if (extra_check) extra_check();
  });
  ranks.groups = make_process_groups(world, dims);
  start_ranks(world);
  if (world.size() > 1)
    check_on_all_ranks(world, [&] { require_same_on_all_ranks(world, "model config", model_config_text); });
  if (dims.ep > 1) {
    ranks.keep = expert_shard_filter(config, ranks.groups.e, dims.ep);
    ranks.dispatcher = std::make_unique<ExpertParallelDispatcher>(*ranks.groups.ep_group);
  }
}

void prepare_on_root(TrainingRanks& ranks, const std::function<void()>& prepare) {
  Communicator& world = *ranks.world;
  int32_t ok = 0;
  if (ranks.root()) {
    try {
      prepare();
      ok = 1;
    } catch (const Error&) {
      world.broadcast(&ok, 1, DType::kI32, 0);
      throw;
    }
  }
  world.broadcast(&ok, 1, DType::kI32, 0);
  if (ok != 1) mpi_abort(1);  // rank 0 failed (and says why): end the job without a second message per rank
}

}  // namespace myriad
