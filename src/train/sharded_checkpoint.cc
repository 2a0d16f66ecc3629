#include "train/sharded_checkpoint.h"

#include <map>
#include <memory>
#include <tuple>

#include "io/checkpoint.h"
#include "model/param_spec.h"

namespace myriad {

std::string save_sharded_run_checkpoint(const ProcessGroups& groups, const ModelConfig& config,
                                        const std::string& run_dir, int64_t step, const CheckpointContents& c,
                                        const OptimizerSharding* sharding, int64_t keep) {
  Communicator& world = *groups.world;
  const bool root = groups.is_root();
  const int ep = groups.dims.ep;
  std::unique_ptr<RunCheckpointWriter> writer;
  std::string staging;
  if (root) {
    writer = std::make_unique<RunCheckpointWriter>(run_dir, step);
    staging = writer->staging();
  }
  int64_t length = int64_t(staging.size());
  world.broadcast(&length, 1, DType::kI64, 0);
  staging.resize(static_cast<size_t>(length));
  world.broadcast(staging.data(), length, DType::kU8, 0);
  const int64_t per = config.num_experts > 0 ? config.num_experts / ep : 1;
  const int64_t optimizer_shards = sharding ? world.size() : ep;
  std::map<std::string, int64_t> model_shard, optimizer_shard;  // checkpoint name -> shard
  uint64_t model_bytes = 0, optimizer_bytes = 0;  // the indexes' total_size: the tensors' data bytes (f32)
  for (const ParamSpec& spec : model_param_specs(config)) {
    const int64_t shard = spec.expert < 0 ? 0 : spec.expert / per;
    model_shard[spec.name] = shard;
    model_bytes += uint64_t(spec.numel()) * 4;
    if (spec.buffer) continue;
    const int64_t o = sharding ? sharding->owner_ranks().at(spec.name) : shard;
    optimizer_shard["m." + spec.name] = optimizer_shard["v." + spec.name] = o;
    optimizer_bytes += uint64_t(spec.numel()) * 8;
  }
  const bool model_writer = groups.d == 0 && groups.s == 0;
  if (model_writer) {
    NamedTensors mine;
    for (const auto& [n, t] : c.weights)
      if (model_shard.at(n) == groups.e) mine.emplace_back(n, t);
    write_weights_shard(staging, groups.e, ep, mine, step);
  }
  if (sharding || model_writer) {  // the optimizer state this rank keeps is all its shard holds
    NamedTensors mine;
    const int64_t me = sharding ? world.rank() : groups.e;
    for (const auto& [n, t] : c.optimizer_state)
      if (optimizer_shard.at(n) == me) mine.emplace_back(n, t);
    write_optimizer_shard(staging, me, optimizer_shards, mine, c.optimizer_step, step);
  }
  world.barrier();  // every shard is complete on disk before the indexes name them
  if (!root) return "";
  for (const auto& [stem, shards, count, bytes] :
       {std::tuple{std::string("model"), &model_shard, int64_t(ep), model_bytes},
        std::tuple{std::string("optimizer"), &optimizer_shard, optimizer_shards, optimizer_bytes}}) {
    std::map<std::string, std::string> map;
    for (const auto& [n, shard] : *shards) map[n] = checkpoint_shard_name(stem, shard, count);
    write_checkpoint_index(staging, stem, map, bytes);
  }
  CheckpointContents rest{c.config_json, {}, {}, c.optimizer_step, c.trainer_state, c.tokenizer_dir, true};
  return writer->commit(rest, keep);
}

}  // namespace myriad
