// Gradient checkpointing: a segment recomputed in backward.
#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/functions.h"
#include "autograd/op_support.h"
#include "core/memory_profile.h"

namespace myriad::ag {

Var checkpoint(std::function<Var(const std::vector<Var>&)> fn, const std::vector<Var>& inputs) {
  Var y;
  {
    NoGradGuard no_grad;
    y = fn(inputs);
  }
  bool needs = grad_enabled();
  if (needs) {
    needs = false;
    for (const Var& in : inputs) needs = needs || in.requires_grad();
  }
  // Trainable weights inside fn are reached through the recompute, so the node is recorded even when no
  // input needs a gradient, as long as recording is on.
  needs = needs || grad_enabled();
  Var out = make_output(y.value(), needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("checkpoint", {oi}, [fn, inputs, oi]() {
      EnableGradGuard grad_on;
      TapeScope scope;
      std::optional<memory_profile::PhaseScope> recompute(memory_profile::Phase::kRecompute);
      std::vector<Var> fresh;  // the same values, as leaves of the recompute's own graph
      fresh.reserve(inputs.size());
      for (const Var& in : inputs) fresh.emplace_back(in.value(), in.requires_grad());
      Var y2 = fn(fresh);
      recompute.reset();  // the recomputed layer's own backward is charged as backward
      if (y2.requires_grad()) Tape::current().backward({{y2, oi->grad}});
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].requires_grad() && fresh[i].has_grad()) cpu_accumulate(inputs[i].grad_buffer(), fresh[i].grad());
    });
  }
  return out;
}

}  // namespace myriad::ag
