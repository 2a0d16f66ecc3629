#include "autograd/tape.h"

#include <optional>

#include "core/memory_profile.h"

namespace myriad::ag {

namespace {
thread_local bool t_grad_enabled = true;
thread_local Tape* t_tape = nullptr;  // null: the thread's base tape
thread_local std::function<void()>* t_progress = nullptr;
}  // namespace

BackwardProgressScope::BackwardProgressScope(std::function<void()> fn) : fn_(std::move(fn)), prev_(t_progress) {
  t_progress = &fn_;
}
BackwardProgressScope::~BackwardProgressScope() {
  t_progress = prev_;
}

Var::Var(Tensor value, bool requires_grad, std::string name) : impl_(std::make_shared<VarImpl>()) {
  MYRIAD_REQUIRE(value.defined(), kValue, "Var: undefined tensor");
  MYRIAD_REQUIRE(!requires_grad || value.dtype() == DType::kF32, kUnsupported, "Var ", name,
                 ": gradients need f32 values, got ", dtype_name(value.dtype()));
  impl_->value = value.is_contiguous() ? std::move(value) : value.contiguous();
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

void Var::zero_grad() {
  if (impl_->grad.defined()) impl_->grad.zero();
}

Tensor& Var::grad_buffer() const {
  if (!impl_->grad.defined()) {
    // A named Var is a weight: its gradient outlives the step (the memory profile counts it apart).
    std::optional<memory_profile::Part> part;
    if (!impl_->name.empty()) part.emplace("weight gradients");
    impl_->grad = Tensor::zeros(impl_->value.shape(), DType::kF32, impl_->value.device());
  }
  return impl_->grad;
}

Tape& Tape::current() {
  thread_local Tape base;
  return t_tape ? *t_tape : base;
}

TapeScope::TapeScope() : prev_(t_tape) {
  t_tape = &tape_;
}
TapeScope::~TapeScope() {
  t_tape = prev_;
}

EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) {
  t_grad_enabled = true;
}
EnableGradGuard::~EnableGradGuard() {
  t_grad_enabled = prev_;
}

void Tape::record(const char* op, std::vector<std::shared_ptr<VarImpl>> outputs, std::function<void()> backward) {
  nodes_.push_back({op, std::move(outputs), std::move(backward), false, memory_profile::current_part()});
}

void Tape::on_backward(std::function<void()> fn) {
  if (!t_grad_enabled) return;
  nodes_.push_back({"on_backward", {}, std::move(fn), true, memory_profile::current_part()});
}

void Tape::backward(const Var& loss) {
  MYRIAD_REQUIRE(loss.defined() && loss.value().numel() == 1, kShape,
                 "backward: the loss must be a single element, got ", shape_str(loss.shape()));
  MYRIAD_REQUIRE(loss.requires_grad(), kValue,
                 "backward: the loss does not depend on anything that requires a gradient");
  backward({{loss, Tensor::full({}, 1.0f).view(loss.shape())}});
}

void Tape::backward(const std::vector<std::pair<Var, Tensor>>& seeds) {
  for (const auto& [v, g] : seeds) {
    MYRIAD_REQUIRE(g.shape() == v.shape(), kShape, "backward: seed gradient ", shape_str(g.shape()),
                   " does not match its output ", shape_str(v.shape()));
    if (!v.requires_grad()) continue;
    cpu_accumulate(v.grad_buffer(), g);
  }
  // Nodes run with recording off (their closures call kernels directly); a node may turn it back on to
  // recompute (gradient checkpointing) on a tape of its own.
  std::vector<TapeNode> nodes = std::move(nodes_);
  nodes_.clear();
  NoGradGuard no_grad;
  memory_profile::PhaseScope phase(memory_profile::Phase::kBackward);
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    bool any = false;
    for (const auto& o : it->outputs) any = any || o->grad.defined();
    if (!any && !it->always) continue;
    memory_profile::Part part(it->part);  // its gradients are charged to the part that recorded it
    it->backward();
    if (t_progress) (*t_progress)();
  }
}

bool grad_enabled() {
  return t_grad_enabled;
}

NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  t_grad_enabled = prev_;
}

bool needs_grad(std::initializer_list<const Var*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Var* v : inputs)
    if (v && v->requires_grad()) return true;
  return false;
}

}  // namespace myriad::ag

namespace myriad::ag {

void cpu_accumulate(Tensor& dst, const Tensor& src) {
  MYRIAD_REQUIRE(dst.device() == Device::kCPU && src.device() == Device::kCPU && dst.shape() == src.shape(), kShape,
                 "gradient accumulation: ", shape_str(src.shape()), " into ", shape_str(dst.shape()));
  Tensor s = src.contiguous();
  float* d = dst.data<float>();
  const float* a = s.data<float>();
  for (int64_t i = 0; i < dst.numel(); ++i) d[i] += a[i];
}

}  // namespace myriad::ag
