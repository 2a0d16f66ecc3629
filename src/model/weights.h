// Model weights as autograd Vars, keyed by checkpoint name (docs/tensors.md). Trainable tensors require
// gradients; buffers (the router's e_score_correction_bias, set by balancing) do not.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "autograd/tape.h"
#include "model/config.h"

namespace myriad {

class Checkpoint;
struct ParamSpec;

// Which of the model's tensors a process holds (all, when absent): under expert parallelism a rank holds the
// routed experts it owns only (dist/expert_parallel.h expert_shard_filter).
using ParamFilter = std::function<bool(const ParamSpec&)>;

class ModelWeights {
 public:
  // Validates names, shapes and dtypes against the config first (one error naming the tensor).
  static ModelWeights from_checkpoint(const Checkpoint& ckpt, const ModelConfig& config, const ParamFilter& keep = {});
  // Each tensor's values depend only on the seed and its name (model/init.h), so a filtered set holds the same
  // values as the full one.
  static ModelWeights random(const ModelConfig& config, uint64_t seed, const ParamFilter& keep = {});

  const ag::Var& at(const std::string& name) const;  // kFormat error naming the tensor when absent
  bool contains(const std::string& name) const { return vars_.count(name) > 0; }
  const std::map<std::string, ag::Var>& all() const { return vars_; }
  void zero_grad();

 private:
  std::map<std::string, ag::Var> vars_;
};

}  // namespace myriad
