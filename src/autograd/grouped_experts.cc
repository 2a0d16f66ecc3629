// grouped_expert_glu: the routed experts as one tape node (see grouped_experts.h); the fused kernel is
// ops::grouped_glu_forward / grouped_glu_backward (src/ops/cpu/grouped_glu.cc for its threading).
#include "autograd/grouped_experts.h"

#include <algorithm>
#include <memory>

#include "autograd/op_support.h"

namespace myriad::ag {

namespace {

void check_weight(const Var& w, const char* what, int64_t e, const Shape& want, Device device) {
  MYRIAD_REQUIRE(w.defined(), kValue, "grouped_expert_glu: ", what, "[", e, "] is undefined");
  MYRIAD_REQUIRE(w.shape() == want, kShape, "grouped_expert_glu: ", what, "[", e, "] is ", shape_str(w.shape()),
                 ", expected ", shape_str(want));
  MYRIAD_REQUIRE(w.value().device() == device, kValue, "grouped_expert_glu: ", what, "[", e, "] is on ",
                 device_name(w.value().device()), ", z_sorted on ", device_name(device));
  MYRIAD_REQUIRE(w.value().dtype() == DType::kF32, kValue, "grouped_expert_glu: ", what, "[", e, "] must be F32, got ",
                 dtype_name(w.value().dtype()));
}

}  // namespace

Var grouped_expert_glu(const Var& z, const std::vector<int64_t>& off, const std::vector<Var>& w1,
                       const std::vector<Var>& w3, const std::vector<Var>& w2, GluParams glu,
                       const std::vector<int64_t>& cuts_in) {
  MYRIAD_REQUIRE(z.defined() && z.value().ndim() == 2, kShape, "grouped_expert_glu: z_sorted must be [C, L], got ",
                 z.defined() ? shape_str(z.shape()) : std::string("undefined"));
  MYRIAD_REQUIRE(z.value().dtype() == DType::kF32, kValue, "grouped_expert_glu: z_sorted must be F32, got ",
                 dtype_name(z.value().dtype()));
  const int64_t C = z.shape()[0], L = z.shape()[1], E = int64_t(w1.size());
  MYRIAD_REQUIRE(E > 0 && int64_t(w3.size()) == E && int64_t(w2.size()) == E && int64_t(off.size()) == E + 1, kShape,
                 "grouped_expert_glu: ", w1.size(), " w1, ", w3.size(), " w3, ", w2.size(), " w2 and ", off.size(),
                 " offsets; expected E >= 1 of each weight and E + 1 offsets");
  MYRIAD_REQUIRE(off.front() == 0 && off.back() == C, kShape, "grouped_expert_glu: offsets run from ", off.front(),
                 " to ", off.back(), ", expected 0 to the ", C, " rows of z_sorted");
  for (int64_t e = 0; e < E; ++e)
    MYRIAD_REQUIRE(off[size_t(e)] <= off[size_t(e + 1)], kValue, "grouped_expert_glu: offsets decrease at expert ", e,
                   " (", off[size_t(e)], " > ", off[size_t(e + 1)], ")");
  MYRIAD_REQUIRE(w1[0].defined() && w1[0].value().ndim() == 2, kShape, "grouped_expert_glu: w1[0] must be [F, L]");
  const int64_t F = w1[0].shape()[0];
  bool weights_need_grad = false;
  for (int64_t e = 0; e < E; ++e) {
    check_weight(w1[size_t(e)], "w1", e, {F, L}, z.value().device());
    check_weight(w3[size_t(e)], "w3", e, {F, L}, z.value().device());
    check_weight(w2[size_t(e)], "w2", e, {L, F}, z.value().device());
    weights_need_grad = weights_need_grad || w1[size_t(e)].requires_grad() || w3[size_t(e)].requires_grad() ||
                        w2[size_t(e)].requires_grad();
  }

  {  // the backward writes each expert's weight gradients from its own thread: a weight shared by two experts
     // would be a data race
    std::vector<const void*> impls;
    for (const auto* ws : {&w1, &w3, &w2})
      for (const Var& w : *ws) impls.push_back(w.impl().get());
    std::sort(impls.begin(), impls.end());
    MYRIAD_REQUIRE(
        std::adjacent_find(impls.begin(), impls.end()) == impls.end(), kValue,
        "grouped_expert_glu: a weight appears twice among the experts' w1, w3, w2 (each must be its own Var)");
  }
  // The GLU inputs of every copy are what backward needs (g, u [C, F]); the GLU output is per-thread scratch.
  const Device dev = z.value().device();
  Tensor y = Tensor::empty({C, L}, DType::kF32, dev), g = Tensor::empty({C, F}, DType::kF32, dev),
         u = Tensor::empty({C, F}, DType::kF32, dev);
  auto pointers = [](const std::vector<Var>& ws) {
    std::vector<const float*> p;
    for (const Var& w : ws) p.push_back(cf(w.value()));
    return p;
  };
  MYRIAD_REQUIRE(std::is_sorted(cuts_in.begin(), cuts_in.end()) &&
                     (cuts_in.empty() || (cuts_in.front() >= 0 && cuts_in.back() <= C)),
                 kValue, "grouped_expert_glu: the ", cuts_in.size(), " row cuts must be sorted and within [0, ", C,
                 "]");
  auto cuts = std::make_shared<const std::vector<int64_t>>(cuts_in);  // the backward reads them later
  GroupedGluShape shape{E, C, L, F, cuts->data(), int64_t(cuts->size())};
  ops::grouped_glu_forward(dev, shape, off.data(), cf(z.value()), pointers(w1).data(), pointers(w3).data(),
                           pointers(w2).data(), glu, mf(y), mf(g), mf(u));

  const bool needs = grad_enabled() && (z.requires_grad() || weights_need_grad);
  Var out(y, needs);
  if (!needs) return out;
  auto oi = out.impl();
  Tape::current().record("grouped_expert_glu", {oi}, [z, off, w1, w3, w2, glu, g, u, oi, shape, cuts, dev, pointers]() {
    // Gradient buffers are allocated here, before the kernel's threads start, and only for experts with rows.
    float* dz = z.requires_grad() ? mf(z.grad_buffer()) : nullptr;
    const size_t experts = w1.size();
    std::vector<float*> d1(experts, nullptr), d3(experts, nullptr), d2(experts, nullptr);
    for (size_t e = 0; e < experts; ++e) {
      if (off[e] == off[e + 1]) continue;
      auto grad_of = [](const Var& w) { return w.requires_grad() ? mf(w.grad_buffer()) : nullptr; };
      d1[e] = grad_of(w1[e]);
      d3[e] = grad_of(w3[e]);
      d2[e] = grad_of(w2[e]);
    }
    ops::grouped_glu_backward(dev, shape, off.data(), cf(oi->grad), cf(z.value()), pointers(w1).data(),
                              pointers(w3).data(), pointers(w2).data(), cf(g), cf(u), glu, dz, d1.data(), d3.data(),
                              d2.data());
  });
  return out;
}

}  // namespace myriad::ag
