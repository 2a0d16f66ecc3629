#include "serve/expert_server.h"

#include "core/error.h"
#include "dist/watchdog.h"

namespace myriad {

namespace {
constexpr int32_t kForward = 1, kStop = 2;
}  // namespace

ExpertLeaderDispatcher::ExpertLeaderDispatcher(Communicator& world, Communicator& ep_group, const ModelConfig& config)
    : world_(world), inner_(ep_group), moe_layers_(config.num_moe_layers()) {
  MYRIAD_REQUIRE(world.rank() == 0, kValue, "the expert-parallel server runs on rank 0");
}

ExpertBatch ExpertLeaderDispatcher::dispatch(const ag::Var& z, const ExpertGroups& groups,
                                             const ag::Var& weights) const {
  if (calls_++ % moe_layers_ == 0) {  // a forward begins: the followers join its MoE layers
    int32_t cmd = kForward;
    world_.broadcast_idle(&cmd, 1, DType::kI32, 0);  // the followers wait in the non-blocking form: match it
  }
  return inner_.dispatch(z, groups, weights);
}

void ExpertLeaderDispatcher::stop() {
  if (stopped_) return;
  stopped_ = true;
  int32_t cmd = kStop;
  world_.broadcast_idle(&cmd, 1, DType::kI32, 0);
}

void run_expert_follower(const InferenceModel& model, const ExpertParallelDispatcher& dispatcher, Communicator& world) {
  const ModelConfig& c = model.config();
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe_layer(l)) moe.push_back(l);
  for (;;) {
    int32_t cmd = 0;
    {
      const UnwatchedWait idle;  // until the next request: as long as the server is idle
      world.broadcast_idle(&cmd, 1, DType::kI32, 0);
    }
    if (cmd == kStop) return;
    MYRIAD_CHECK(cmd == kForward, "expert server: unknown command ", cmd, " from rank 0");
    for (const int64_t l : moe) model.serve_remote_experts(l, dispatcher);
  }
}

}  // namespace myriad
