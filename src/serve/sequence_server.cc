#include "serve/sequence_server.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "dist/sequence_parallel_prefill.h"
#include "dist/watchdog.h"

namespace myriad {

namespace {

constexpr int64_t kPrefill = 1, kStop = 2;

// The prefill of this rank's shard of `prompt` into `seq` (fresh); the logits of the shard's last token.
Tensor run_shard(const InferenceModel& model, Communicator& shards_comm, SequenceState& seq,
                 std::span<const int32_t> prompt) {
  CommunicatorPrefillShards shards(shards_comm, int64_t(prompt.size()));
  const int64_t first = shards.offset(shards.index());
  const BatchEntry entry{&seq, prompt.subspan(size_t(first), size_t(shards.rows(shards.index()))), &shards};
  return model.forward(std::span<const BatchEntry>(&entry, 1));
}

}  // namespace

SequenceParallelServing::SequenceParallelServing(Communicator& world)
    : world_(world), shards_(world.split(0, world.size() - 1 - world.rank())) {}

int64_t SequenceParallelServing::min_tokens(const ModelConfig& c, int ranks) {
  const int64_t window = c.linear_attn_config ? c.linear_attn_config->short_conv_kernel_size - 1 : 0;
  return int64_t(ranks) * std::max<int64_t>(window, 1);
}

Tensor SequenceParallelServing::prefill(const InferenceModel& model, SequenceState& seq,
                                        std::span<const int32_t> prompt) {
  MYRIAD_REQUIRE(world_.rank() == 0 && !stopped_, kValue, "sequence-parallel prefill: rank 0 leads, until stop()");
  const int64_t need = min_tokens(model.config(), world_.size());
  MYRIAD_REQUIRE(int64_t(prompt.size()) >= need, kValue, "sequence-parallel prefill: a prompt of ", prompt.size(),
                 " tokens over ", world_.size(), " ranks; it needs at least ", need);
  MYRIAD_REQUIRE(seq.tokens == 0 && !seq.mla.empty(), kValue, "sequence-parallel prefill: the sequence must be fresh");
  // The followers' caches must store rows as this one does (a q8 cache's attention reads the quantized rows).
  int64_t page_tokens = 0, dtype = int64_t(DType::kF32);
  for (size_t l = 0; l < seq.mla.size(); ++l)
    if (!seq.kda[l].S.defined()) {
      page_tokens = seq.mla[l].page_tokens();
      dtype = int64_t(seq.mla[l].dtype());
      break;
    }
  int64_t cmd[4] = {kPrefill, int64_t(prompt.size()), page_tokens, dtype};
  world_.broadcast_idle(cmd, 4, DType::kI64, 0);  // the followers wait in the non-blocking form: match it
  world_.broadcast(const_cast<int32_t*>(prompt.data()), int64_t(prompt.size()), DType::kI32, 0);
  return run_shard(model, *shards_, seq, prompt);
}

void SequenceParallelServing::stop() {
  if (stopped_ || world_.rank() != 0) return;
  stopped_ = true;
  int64_t cmd[4] = {kStop, 0, 0, 0};
  world_.broadcast_idle(cmd, 4, DType::kI64, 0);
}

void SequenceParallelServing::follow(const InferenceModel& model) {
  MYRIAD_REQUIRE(world_.rank() != 0, kValue, "sequence-parallel serving: rank 0 leads, the others follow");
  for (;;) {
    int64_t cmd[4] = {0, 0, 0, 0};
    {
      const UnwatchedWait idle;  // until the next long prompt: as long as the server is idle
      world_.broadcast_idle(cmd, 4, DType::kI64, 0);
    }
    if (cmd[0] == kStop) return;
    MYRIAD_CHECK(cmd[0] == kPrefill && cmd[1] > 0, "sequence-parallel server: unknown command ", cmd[0],
                 " from rank 0");
    std::vector<int32_t> prompt(static_cast<size_t>(cmd[1]));
    world_.broadcast(prompt.data(), cmd[1], DType::kI32, 0);
    SequenceState seq = model.new_sequence(cmd[2] > 0 ? cmd[2] : MlaCache::kDefaultPageTokens, DType(cmd[3]));
    (void)run_shard(model, *shards_, seq, prompt);
  }
}

}  // namespace myriad
