// AdamW over the model's trainable weights (DESIGN §2): decoupled weight decay (none on norms, biases, A_log,
// dt_bias; buffers such as the router's correction bias are not touched), global-norm gradient clipping, and
// its state (m, v per tensor, the step count) saved and restored as safetensors for exact resumption.
#pragma once

#include <map>
#include <string>

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

class AdamW {
 public:
  AdamW(const ModelConfig& config, const ModelWeights& weights, AdamWConfig hp);

  // Global L2 norm of all gradients (double accumulation); infinite or NaN when any gradient is.
  double grad_norm(const ModelWeights& weights) const;
  // One update with learning rate lr; gradients are scaled by clip_scale first (1 = no clipping).
  void step(ModelWeights& weights, float lr, float clip_scale);
  int64_t steps() const { return step_; }

  void save(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  void load(const std::string& path);  // checks every tensor's presence and shape

 private:
  AdamWConfig hp_;
  int64_t step_ = 0;
  std::map<std::string, bool> decay_;  // trainable tensors -> weight decay on/off
  std::map<std::string, Tensor> m_, v_;
};

}  // namespace myriad
