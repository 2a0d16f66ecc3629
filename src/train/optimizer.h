// AdamW over the model's trainable weights (docs/design.md §2): decoupled weight decay (none on norms, biases, A_log,
// dt_bias; buffers such as the router's correction bias are not touched), global-norm gradient clipping, and
// its state (m, v per tensor, the step count) saved and restored as safetensors for exact resumption.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "io/safetensors.h"
#include "model/weights.h"
#include "ops/kernels.h"

namespace myriad {

struct ModelConfig;

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// Writes optimizer state tensors (AdamW::state_tensors(), possibly gathered from several ranks) with the step.
void save_optimizer_state(const std::string& path, const NamedTensors& state, int64_t step,
                          const std::map<std::string, std::string>& metadata = {});

class AdamW {
 public:
  // Over the trainable tensors `weights` holds (all of the config's, or a rank's shard of the experts), and of
  // those only the ones `keeps` accepts when given (ZeRO-1: this rank's share; the others it neither updates nor
  // keeps state for).
  AdamW(const ModelConfig& config, const ModelWeights& weights, AdamWConfig hp,
        const std::function<bool(const std::string&)>& keeps = {});

  // The tensors a step leaves alone (a stage's frozen modules): neither updated nor decayed, their state kept.
  using Frozen = std::function<bool(const std::string&)>;
  // Global L2 norm of all gradients but the frozen ones (double accumulation); infinite or NaN when any is.
  double grad_norm(const ModelWeights& weights, const Frozen& frozen = {}) const;
  // One update with learning rate lr; gradients are scaled by clip_scale first (1 = no clipping).
  void step(ModelWeights& weights, float lr, float clip_scale, const Frozen& frozen = {});
  int64_t steps() const { return step_; }

  // The state as tensors "m.<name>", "v.<name>" (this process's: under expert parallelism its experts only).
  NamedTensors state_tensors() const;
  void save(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  // Loads the state of the tensors this optimizer holds (a checkpoint with more, e.g. every expert when this
  // rank holds some, is fine): checks each one's presence and shape. path: a safetensors file, or a checkpoint
  // directory holding optimizer.safetensors or its shards with optimizer.safetensors.index.json.
  void load(const std::string& path);

 private:
  AdamWConfig hp_;
  int64_t step_ = 0;
  std::map<std::string, bool> decay_;  // trainable tensors -> weight decay on/off
  std::map<std::string, Tensor> m_, v_;
};

}  // namespace myriad
