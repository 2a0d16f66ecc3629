#include "infer/decode_weights.h"

#include <set>

#include "io/checkpoint.h"
#include "model/param_spec.h"

namespace myriad {

namespace {

Tensor f32_contiguous(const Tensor& t) {
  Tensor r = t.dtype() == DType::kF32 ? t : t.to(DType::kF32);
  return r.is_contiguous() ? r : r.contiguous();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<const DecodeWeights> DecodeWeights::from_model(const ModelWeights& w) {
  auto d = std::make_shared<DecodeWeights>();
  for (const auto& [name, var] : w.all()) {
    MYRIAD_REQUIRE(var.value().device() == d->device(), kUnsupported, "inference: weight ", name, " is on ",
                   device_name(var.value().device()), "; the inference layer runs on ", device_name(d->device()),
                   " only (copy the model to the CPU first)");
    Tensor t = f32_contiguous(var.value());
    if (t.ndim() == 2) d->linear_.emplace(name, LinearWeight::dense(t));
    d->dense_.emplace(name, std::move(t));
  }
  return d;
}

std::shared_ptr<const DecodeWeights> DecodeWeights::from_checkpoint(const Checkpoint& ck, const ModelConfig& c,
                                                                    const ParamFilter& keep) {
  auto d = std::make_shared<DecodeWeights>();
  std::set<std::string> used;
  for (const ParamSpec& spec : model_param_specs(c)) {
    if (keep && !keep(spec)) {  // another rank's: accounted for, not read
      for (const std::string& n : {spec.name, spec.name + kQWeightSuffix, spec.name + kQScaleSuffix}) used.insert(n);
      continue;
    }
    if (ck.contains(spec.name)) {
      const Tensor t = ck.tensor(spec.name);
      MYRIAD_REQUIRE(t.shape() == spec.shape, kFormat, "checkpoint: tensor ", spec.name, " is ", shape_str(t.shape()),
                     ", the config needs ", shape_str(spec.shape));
      MYRIAD_REQUIRE(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16, kFormat,
                     "checkpoint: tensor ", spec.name, " has dtype ", dtype_name(t.dtype()),
                     "; expected F32, BF16 or F16");
      Tensor f = f32_contiguous(t);
      if (f.ndim() == 2) d->linear_.emplace(spec.name, LinearWeight::dense(f));
      d->dense_.emplace(spec.name, std::move(f));
      used.insert(spec.name);
      continue;
    }
    std::optional<QuantMatrix> q = load_quant_matrix(ck, spec.name);
    MYRIAD_REQUIRE(q.has_value(), kFormat, "checkpoint: tensor ", spec.name, " ", shape_str(spec.shape),
                   " is missing (neither stored plain nor quantized)");
    MYRIAD_REQUIRE(spec.shape.size() == 2 && q->rows == spec.shape[0] && q->cols == spec.shape[1], kFormat,
                   "checkpoint: quantized tensor ", spec.name, " is [", q->rows, ", ", q->cols, "], the config needs ",
                   shape_str(spec.shape));
    d->linear_.emplace(spec.name, LinearWeight::quantized(std::move(*q)));
    ++d->quantized_;
    used.insert(spec.name + kQWeightSuffix);
    used.insert(spec.name + kQScaleSuffix);
  }
  for (const std::string& name : ck.names())
    MYRIAD_REQUIRE(used.count(name), kFormat, "checkpoint: tensor ", name, " is not in the model",
                   ends_with(name, kQWeightSuffix) || ends_with(name, kQScaleSuffix)
                       ? " (a quantized tensor whose partner is stored plain)"
                       : "");
  return d;
}

std::shared_ptr<const DecodeWeights> DecodeWeights::quantized(const DecodeWeights& src, const ModelConfig& c,
                                                              QuantType type, bool only_experts) {
  auto d = std::make_shared<DecodeWeights>(src);
  for (const ParamSpec& spec : model_param_specs(c)) {
    if (!is_quantizable_linear(spec) || (only_experts && spec.component != Component::kRoutedExperts) ||
        spec.shape[1] % kQuantGroup != 0)
      continue;
    const LinearWeight& l = src.linear(spec.name);
    if (l.is_quantized()) continue;
    d->linear_[spec.name] = LinearWeight::quantized(quantize(l.dense_weight(), type));
    d->dense_.erase(spec.name);
    ++d->quantized_;
  }
  return d;
}

const Tensor& DecodeWeights::tensor(const std::string& name) const {
  auto it = dense_.find(name);
  MYRIAD_REQUIRE(it != dense_.end(), kFormat, "decode weights: tensor ", name,
                 linear_.count(name) ? " is stored quantized; this use needs it plain" : " is missing");
  return it->second;
}

const LinearWeight& DecodeWeights::linear(const std::string& name) const {
  auto it = linear_.find(name);
  MYRIAD_REQUIRE(it != linear_.end(), kFormat, "decode weights: linear weight ", name, " is missing");
  return it->second;
}

void DecodeWeights::for_each_tensor(const std::function<void(const std::string&, const Tensor&)>& visit) const {
  for (const auto& [name, t] : dense_) visit(name, t);
  for (const auto& [name, l] : linear_) {
    if (!l.is_quantized()) {
      visit(name, l.dense_weight());
      continue;
    }
    visit(name + ".qweight", l.quant_matrix().codes);
    visit(name + ".qscale", l.quant_matrix().scales);
  }
}

}  // namespace myriad
