#include "dist/optimizer_sharding.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/param_spec.h"

namespace myriad {

namespace {

// Greedy assignment: largest first (ties by name), each to the replica with the fewest parameters so far.
std::map<std::string, int> assign(std::vector<const ParamSpec*> specs, int replicas) {
  std::stable_sort(specs.begin(), specs.end(), [](const ParamSpec* a, const ParamSpec* b) {
    return a->numel() != b->numel() ? a->numel() > b->numel() : a->name < b->name;
  });
  std::vector<int64_t> load(static_cast<size_t>(replicas), 0);
  std::map<std::string, int> owner;
  for (const ParamSpec* s : specs) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    owner[s->name] = r;
    load[size_t(r)] += s->numel();
  }
  return owner;
}

}  // namespace

OptimizerSharding::OptimizerSharding(const ModelConfig& config, ModelWeights& weights, ProcessGroups& g) {
  const ParallelDims& d = g.dims;
  dense_.comm = g.world;
  experts_.comm = g.expert_replicas.get();
  dense_.by_owner.resize(static_cast<size_t>(g.world->size()));
  experts_.by_owner.resize(static_cast<size_t>(g.expert_replicas->size()));
  const std::vector<ParamSpec> specs = model_param_specs(config);
  std::vector<const ParamSpec*> dense, experts;
  for (const ParamSpec& s : specs) {
    if (s.buffer) continue;
    (s.expert < 0 ? dense : experts).push_back(&s);
  }
  const std::map<std::string, int> dense_owner = assign(dense, g.world->size());
  // An expert's replicas are the dp x sp ranks of its ep slice (ordered d sp + s); the same assignment in every
  // slice.
  const std::map<std::string, int> expert_owner = assign(experts, d.dp * d.sp);
  const int64_t per = config.num_experts > 0 ? config.num_experts / d.ep : 1;
  for (const ParamSpec& s : specs) {
    if (s.buffer) continue;
    if (s.expert < 0) {
      const int o = dense_owner.at(s.name);
      owner_rank_[s.name] = o;
      mine_[s.name] = o == g.rank;
      if (weights.contains(s.name)) dense_.by_owner[size_t(o)].push_back(weights.at(s.name));
    } else {
      const int o = expert_owner.at(s.name);  // an index among the replicas: d sp + s
      const int e = int(s.expert / per);
      owner_rank_[s.name] = ((o / d.sp) * d.ep + e) * d.sp + o % d.sp;  // that replica's world rank
      mine_[s.name] = weights.contains(s.name) && o == g.d * d.sp + g.s;
      if (weights.contains(s.name)) experts_.by_owner[size_t(o)].push_back(weights.at(s.name));
    }
  }
}

bool OptimizerSharding::owns(const std::string& name) const {
  auto it = mine_.find(name);
  return it != mine_.end() && it->second;
}

void OptimizerSharding::broadcast_group(Group& g) {
  if (g.comm->size() == 1) return;
  for (size_t owner = 0; owner < g.by_owner.size(); ++owner) {
    int64_t n = 0;
    for (const ag::Var& v : g.by_owner[owner]) n += v.value().numel();
    if (n == 0) continue;
    buffer_.resize(static_cast<size_t>(n));
    const bool me = int(owner) == g.comm->rank();
    int64_t at = 0;
    if (me)
      for (const ag::Var& v : g.by_owner[owner]) {
        std::memcpy(buffer_.data() + at, v.value().data<float>(), size_t(v.value().numel()) * sizeof(float));
        at += v.value().numel();
      }
    g.comm->broadcast(buffer_.data(), n, DType::kF32, int(owner));
    if (me) continue;
    at = 0;
    for (const ag::Var& v : g.by_owner[owner]) {
      Tensor t = v.value();
      std::memcpy(t.data<float>(), buffer_.data() + at, size_t(t.numel()) * sizeof(float));
      at += t.numel();
    }
  }
}

void OptimizerSharding::broadcast_updates() {
  broadcast_group(dense_);
  broadcast_group(experts_);
}

}  // namespace myriad
