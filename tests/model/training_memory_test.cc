// The memory profile of a training step (core/memory_profile.h) on the tiny model: every tensor the step made is
// given back except the weights' gradients (counted independently from the weights), the split at the peak adds
// up, each part of the model is charged, and gradient checkpointing shows as what it is: far fewer forward
// activations kept, one layer's recompute at the peak instead.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/memory_profile.h"
#include "model/config.h"
#include "model/transformer.h"

namespace myriad {
namespace {

struct StepProfile {
  memory_profile::Report report;
  size_t gradient_bytes = 0;  // counted from the weights after the step
};

StepProfile profile_step(bool checkpoint) {
  const ModelConfig c =
      load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);  // 4 layers: dense, KDA
  const int64_t T = 256;
  std::vector<int64_t> ids(T), tg(T);
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = (t * 29 + 3) % c.vocab_size;
  for (int64_t t = 0; t < T; ++t) tg[size_t(t)] = t + 1 < T ? ids[size_t(t + 1)] : -100;
  const Tensor tokens = Tensor::from_vector(ids, {T}), targets = Tensor::from_vector(tg, {T});
  Transformer model(c, ModelWeights::random(c, 3));  // no gradient yet: the step allocates them
  StepProfile out;
  memory_profile::start();
  {
    ForwardOptions o;
    o.checkpoint_layers = checkpoint;
    ForwardResult r = model.forward(tokens, targets, o);
    ag::backward(r.loss);
  }
  out.report = memory_profile::report();
  memory_profile::stop();
  for (const auto& [name, w] : model.weights().all())
    if (w.has_grad()) out.gradient_bytes += size_t(w.grad().numel()) * sizeof(float);
  return out;
}

size_t bytes_of(const std::vector<memory_profile::Entry>& entries, const std::string& phase) {
  size_t n = 0;
  for (const auto& e : entries)
    if (phase.empty() || e.phase == phase) n += e.bytes;
  return n;
}

TEST(TrainingMemory, TheStepGivesBackAllButTheGradientsAndTheSplitAddsUp) {
  for (const bool checkpoint : {false, true}) {
    SCOPED_TRACE(checkpoint ? "checkpointed" : "plain");
    const StepProfile p = profile_step(checkpoint);
    ASSERT_GT(p.gradient_bytes, 0u);
    // After the step only the weights' gradients remain: a leaked activation or a wrong release would show here.
    EXPECT_EQ(p.report.live_bytes, p.gradient_bytes);
    for (const auto& e : p.report.live) EXPECT_EQ(e.part, "weight gradients") << e.phase << "/" << e.part;
    EXPECT_EQ(bytes_of(p.report.at_peak, ""), p.report.peak_bytes);
    EXPECT_GT(p.report.peak_bytes, p.gradient_bytes);
  }
}

TEST(TrainingMemory, EachPartIsChargedAndCheckpointingKeepsFewerActivations) {
  const StepProfile plain = profile_step(false), ck = profile_step(true);
  // Without checkpointing the peak comes as the backward starts: every part's saved forward tensors are live.
  std::set<std::string> parts;
  for (const auto& e : plain.report.at_peak)
    if (e.phase == "forward") parts.insert(e.part);
  for (const char* want : {"embedding", "kda", "mla", "dense ffn", "moe", "attn_res", "lm head + loss"})
    EXPECT_TRUE(parts.count(want)) << want << " has no forward bytes at the peak";
  EXPECT_EQ(bytes_of(plain.report.at_peak, "recompute"), 0u);
  // With checkpointing the forward keeps each layer's output only (and the head's tensors), and the layer being
  // recomputed holds its own. Each of the 4 layers saves several [T, hidden] tensors per module (norms,
  // projections, gates, the MoE's copies), so keeping one [T, hidden] per layer is well under half.
  EXPECT_GT(bytes_of(ck.report.at_peak, "recompute"), 0u);
  EXPECT_LT(2 * bytes_of(ck.report.at_peak, "forward"), bytes_of(plain.report.at_peak, "forward"));
  EXPECT_LT(ck.report.peak_bytes, plain.report.peak_bytes);
}

}  // namespace
}  // namespace myriad
