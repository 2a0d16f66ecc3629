#include "dist/expert_gather.h"

#include <map>

#include "core/error.h"
#include "model/param_spec.h"

namespace myriad {

NamedTensors gather_experts_to_root(const ModelConfig& config, const NamedTensors& local,
                                    const std::vector<std::string>& prefixes, ProcessGroups& groups) {
  std::map<std::string, Tensor> have(local.begin(), local.end());
  const int ep = groups.dims.ep;
  if (ep == 1) {  // every rank holds everything: the root's own
    if (!groups.is_root()) return {};
    return NamedTensors(have.begin(), have.end());
  }
  if (groups.d != 0 || groups.s != 0) return {};  // the root's ep group alone gathers
  const int64_t per = config.num_experts / ep;
  for (const std::string& prefix : prefixes)
    for (const ParamSpec& spec : model_param_specs(config)) {
      if (spec.expert < 0) continue;
      const std::string name = prefix + spec.name;
      const int owner = int(spec.expert / per);
      // The owner says whether its set has the tensor (an optimizer state has no buffers), then sends it.
      Tensor t;
      int32_t present = 0;
      if (owner == groups.e) {
        auto it = have.find(name);
        present = it != have.end();
        if (present) t = it->second.contiguous();
      }
      groups.ep_group->broadcast(&present, 1, DType::kI32, owner);
      if (!present) continue;
      if (owner != groups.e) t = Tensor::empty(spec.shape, spec.dtype);
      MYRIAD_CHECK(t.dtype() == spec.dtype && t.numel() == spec.numel(), "expert gather: ", name, " is ",
                   dtype_name(t.dtype()), " ", shape_str(t.shape()), ", expected ", shape_str(spec.shape));
      groups.ep_group->broadcast(t.raw_data(), t.numel(), t.dtype(), owner);
      if (groups.is_root()) have[name] = t;
    }
  if (!groups.is_root()) return {};
  return NamedTensors(have.begin(), have.end());
}

}  // namespace myriad
