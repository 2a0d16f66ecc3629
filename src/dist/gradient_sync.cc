#include "dist/gradient_sync.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/param_spec.h"

namespace myriad {

GradientSync::GradientSync(const ModelConfig& config, ModelWeights& weights, ProcessGroups& groups,
                           int64_t bucket_bytes)
    : groups_(groups), bucket_floats_(std::max<int64_t>(1, bucket_bytes / int64_t(sizeof(float)))) {
  // model_param_specs' order is the same on every rank: the buckets line up.
  for (const ParamSpec& spec : model_param_specs(config)) {
    if (spec.buffer || !weights.contains(spec.name)) continue;
    const ag::Var& v = weights.at(spec.name);
    MYRIAD_CHECK(v.value().dtype() == DType::kF32, "gradient sync: ", spec.name, " is not f32");
    (spec.expert >= 0 ? experts_ : dense_).push_back(v);
  }
}

void GradientSync::reduce_group(const std::vector<ag::Var>& vars, Communicator& comm) {
  if (comm.size() == 1 || vars.empty()) return;
  // Which tensors have a gradient on some rank: those get one everywhere (zeros where missing).
  std::vector<int32_t> has(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) has[i] = vars[i].has_grad() ? 1 : 0;
  comm.all_reduce_span(std::span<int32_t>(has), ReduceOp::kMax);
  std::vector<const ag::Var*> live;
  for (size_t i = 0; i < vars.size(); ++i)
    if (has[i]) {
      (void)vars[i].grad_buffer();
      live.push_back(&vars[i]);
    }
  // Pack tensors in order into buckets; a tensor larger than a bucket is reduced in place on its own.
  size_t i = 0;
  while (i < live.size()) {
    const Tensor& g0 = live[i]->grad();
    if (g0.numel() >= bucket_floats_) {
      comm.all_reduce(g0.data<float>(), g0.numel(), DType::kF32, ReduceOp::kSum);
      ++i;
      continue;
    }
    size_t j = i;
    int64_t used = 0;
    while (j < live.size() && live[j]->grad().numel() < bucket_floats_ &&
           used + live[j]->grad().numel() <= bucket_floats_)
      used += live[j++]->grad().numel();
    bucket_.resize(static_cast<size_t>(used));
    int64_t off = 0;
    for (size_t t = i; t < j; ++t) {
      const Tensor& g = live[t]->grad();
      std::memcpy(bucket_.data() + off, g.data<float>(), size_t(g.numel()) * sizeof(float));
      off += g.numel();
    }
    comm.all_reduce(bucket_.data(), used, DType::kF32, ReduceOp::kSum);
    off = 0;
    for (size_t t = i; t < j; ++t) {
      const Tensor& g = live[t]->grad();
      std::memcpy(g.data<float>(), bucket_.data() + off, size_t(g.numel()) * sizeof(float));
      off += g.numel();
    }
    i = j;
  }
}

void GradientSync::all_reduce() {
  const auto t0 = std::chrono::steady_clock::now();
  reduce_group(dense_, *groups_.world);
  reduce_group(experts_, *groups_.expert_replicas);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

double sum_squares(const std::vector<ag::Var>& vars) {
  double ss = 0;
  for (const ag::Var& v : vars) {
    if (!v.has_grad()) continue;
    const float* g = v.grad().data<float>();
    const int64_t n = v.grad().numel();
    double s = 0;
#pragma omp parallel for reduction(+ : s) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) s += double(g[i]) * double(g[i]);
    ss += s;
  }
  return ss;
}

}  // namespace

double GradientSync::grad_norm() const {
  double experts = sum_squares(experts_);
  if (groups_.ep_group) experts = groups_.ep_group->all_reduce_value(experts);
  return std::sqrt(sum_squares(dense_) + experts);
}

}  // namespace myriad
