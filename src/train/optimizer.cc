#include "train/optimizer.h"

#include <charconv>
#include <cmath>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/param_spec.h"

namespace myriad {

AdamW::AdamW(const ModelConfig& config, const ModelWeights& weights, AdamWConfig hp,
             const std::function<bool(const std::string&)>& keeps)
    : hp_(hp) {
  for (const ParamSpec& spec : model_param_specs(config)) {
    if (spec.buffer || !weights.contains(spec.name)) continue;  // a rank's shard holds some experts only
    if (keeps && !keeps(spec.name)) continue;                   // ZeRO-1: another replica's share
    decay_[spec.name] = spec.weight_decay;
    m_[spec.name] = Tensor::zeros(spec.shape);
    v_[spec.name] = Tensor::zeros(spec.shape);
  }
}

double AdamW::grad_norm(const ModelWeights& weights, const Frozen& frozen) const {
  double ss = 0.0;
  for (const auto& [name, on] : decay_) {
    const ag::Var& v = weights.at(name);
    if (!v.has_grad() || (frozen && frozen(name))) continue;
    const float* g = v.grad().data<float>();
    const int64_t n = v.grad().numel();
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) s += double(g[i]) * double(g[i]);
    ss += s;
  }
  return std::sqrt(ss);
}

void AdamW::step(ModelWeights& weights, float lr, float clip_scale, const Frozen& frozen) {
  ++step_;
  for (auto& [name, decay] : decay_) {
    if (frozen && frozen(name)) continue;
    const ag::Var& var = weights.at(name);
    Tensor p = var.value();
    Tensor g = var.has_grad() ? var.grad() : Tensor::zeros(var.shape());  // an unused expert still decays
    if (clip_scale != 1.0f) ops::scale(g.device(), g.data<float>(), g.data<float>(), clip_scale, g.numel());
    const AdamWParams hp{lr, hp_.beta1, hp_.beta2, hp_.eps, decay ? hp_.weight_decay : 0.0f, step_};
    ops::adamw_update(p.device(), p.data<float>(), g.data<float>(), m_.at(name).data<float>(),
                      v_.at(name).data<float>(), p.numel(), hp);
  }
}

NamedTensors AdamW::state_tensors() const {
  NamedTensors t;
  for (const auto& [name, m] : m_) t.emplace_back("m." + name, m);
  for (const auto& [name, v] : v_) t.emplace_back("v." + name, v);
  return t;
}

void save_optimizer_state(const std::string& path, const NamedTensors& state, int64_t step,
                          const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> meta = metadata;
  meta["adamw_step"] = std::to_string(step);
  save_safetensors(path, state, meta);
}

void AdamW::save(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  save_optimizer_state(path, state_tensors(), step_, metadata);
}

void AdamW::load(const std::string& path) {
  // A file, or a checkpoint directory's optimizer.safetensors or its shards (optimizer.safetensors.index.json).
  const Checkpoint f = Checkpoint::open(path, "optimizer");
  auto it = f.metadata().find("adamw_step");
  MYRIAD_REQUIRE(it != f.metadata().end(), kFormat, path, ": optimizer state has no adamw_step metadata");
  // Strictly a non-negative decimal (std::stoll took "5junk" and "-3", and threw a bare invalid_argument on "x").
  const std::string& s = it->second;
  int64_t step = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), step);
  MYRIAD_REQUIRE(ec == std::errc() && end == s.data() + s.size() && step >= 0, kFormat, path,
                 ": optimizer state's adamw_step metadata \"", s, "\" is not a non-negative integer");
  step_ = step;
  for (auto* table : {&m_, &v_}) {
    const std::string prefix = table == &m_ ? "m." : "v.";
    for (auto& [name, t] : *table) {
      MYRIAD_REQUIRE(f.contains(prefix + name), kFormat, path, ": optimizer state lacks ", prefix + name,
                     " (a checkpoint from another config?)");
      Tensor src = f.tensor(prefix + name);
      MYRIAD_REQUIRE(src.shape() == t.shape(), kFormat, path, ": ", prefix + name, " has shape ",
                     shape_str(src.shape()), ", expected ", shape_str(t.shape()));
      t.copy_from(src);
    }
  }
}

}  // namespace myriad
