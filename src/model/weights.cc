#include "model/weights.h"

#include "io/checkpoint.h"
#include "model/init.h"
#include "model/param_spec.h"

namespace myriad {

ModelWeights ModelWeights::from_checkpoint(const Checkpoint& ckpt, const ModelConfig& config, const ParamFilter& keep) {
  validate_checkpoint_against_config(ckpt, config);
  ModelWeights w;
  for (const ParamSpec& spec : model_param_specs(config)) {
    if (keep && !keep(spec)) continue;
    // A private copy: the mapping is copy-on-write, but training writes every element anyway.
    const Tensor t = ckpt.tensor(spec.name);
    w.vars_.emplace(spec.name,
                    ag::Var(t.dtype() == DType::kF32 ? t.clone() : t.to(DType::kF32), !spec.buffer, spec.name));
  }
  return w;
}

ModelWeights ModelWeights::random(const ModelConfig& config, uint64_t seed, const ParamFilter& keep) {
  ModelWeights w;
  for (const ParamSpec& spec : model_param_specs(config))
    if (!keep || keep(spec))
      w.vars_.emplace(spec.name, ag::Var(init_param(spec, config, seed), !spec.buffer, spec.name));
  return w;
}

const ag::Var& ModelWeights::at(const std::string& name) const {
  auto it = vars_.find(name);
  MYRIAD_REQUIRE(it != vars_.end(), kFormat, "model weights: tensor ", name, " is missing");
  return it->second;
}

void ModelWeights::zero_grad() {
  for (auto& [name, v] : vars_) v.zero_grad();
}

}  // namespace myriad
