#include "autograd/tape.h"

namespace myriad::ag {

namespace {
thread_local bool t_grad_enabled = true;
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
  if (!impl_->grad.defined()) impl_->grad = Tensor::zeros(impl_->value.shape(), DType::kF32, impl_->value.device());
  return impl_->grad;
}

Tape& Tape::current() {
  thread_local Tape tape;
  return tape;
}

void Tape::record(const char* op, std::vector<std::shared_ptr<VarImpl>> outputs, std::function<void()> backward) {
  nodes_.push_back({op, std::move(outputs), std::move(backward)});
}

void Tape::backward(const Var& loss) {
  MYRIAD_REQUIRE(loss.defined() && loss.value().numel() == 1, kShape,
                 "backward: the loss must be a single element, got ", shape_str(loss.shape()));
  MYRIAD_REQUIRE(loss.requires_grad(), kValue,
                 "backward: the loss does not depend on anything that requires a gradient");
  Var l = loss;
  Tensor& g = l.grad_buffer();
  g.fill(1.0f);
  NoGradGuard no_grad;  // backward closures use the kernels directly; nothing they do is recorded
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    bool any = false;
    for (const auto& o : it->outputs) any = any || o->grad.defined();
    if (any) it->backward();
  }
  nodes_.clear();
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
