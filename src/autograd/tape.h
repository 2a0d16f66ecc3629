// Autograd: eager execution that records a tape while gradients are enabled.
//  - A Var holds a value tensor, its gradient (allocated on first accumulation) and whether it needs one.
//  - Every differentiable op (functions.h) computes its forward with the backend kernels and, when any
//    input requires a gradient, appends one TapeNode whose hand-written backward reads the outputs'
//    gradients and ACCUMULATES into the inputs' (so a Var used twice receives both contributions, and
//    leaf gradients accumulate across backward() calls until zero_grad()).
//  - Fused ops (attention, cross-entropy, SiTU-GLU, gated RMSNorm) are single nodes.
//  - NoGradGuard turns recording off for inference; the tape is per thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace myriad::ag {

struct VarImpl {
  Tensor value;
  Tensor grad;  // undefined until something accumulates into it
  bool requires_grad = false;
  std::string name;
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false, std::string name = {});

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& value() { return impl_->value; }
  const Tensor& grad() const { return impl_->grad; }
  bool has_grad() const { return impl_->grad.defined(); }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  const Shape& shape() const { return impl_->value.shape(); }
  const std::string& name() const { return impl_->name; }
  void zero_grad();
  // grad += g (allocates a zero gradient of the value's shape first). Used by the tape and by tests.
  // The gradient, allocated (zeros) if needed. const: a Var is a handle; the gradient lives in the shared impl.
  Tensor& grad_buffer() const;
  const std::shared_ptr<VarImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<VarImpl> impl_;
};

struct TapeNode {
  const char* op;
  std::vector<std::shared_ptr<VarImpl>> outputs;
  std::function<void()> backward;
  bool always = false;         // runs even when no output has a gradient (on_backward's markers)
  const char* part = "other";  // the model part that recorded it (core/memory_profile.h)
};

class Tape {
 public:
  static Tape& current();  // this thread's current tape (see TapeScope)
  void record(const char* op, std::vector<std::shared_ptr<VarImpl>> outputs, std::function<void()> backward);
  // A marker: `fn` runs when the backward reaches this point of the tape (every node recorded after it has run),
  // whatever has a gradient. The data-parallel sync learns this way that a layer's weights have their gradients
  // (model/gradient_ready.h). Only while recording (grad_enabled()).
  void on_backward(std::function<void()> fn);
  // Seeds d(loss) = 1 (loss must have one element) and runs every recorded node in reverse, then clears.
  void backward(const Var& loss);
  // Seeds the given gradients on several outputs (each [shape of its Var]) and runs the tape in reverse.
  void backward(const std::vector<std::pair<Var, Tensor>>& seeds);
  void clear() { nodes_.clear(); }
  size_t size() const { return nodes_.size(); }

 private:
  std::vector<TapeNode> nodes_;
};

bool grad_enabled();

// Makes a fresh tape current for its lifetime (recomputation inside a backward records on its own tape).
class TapeScope {
 public:
  TapeScope();
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape tape_;
  Tape* prev_;
};

// While one exists, `fn` runs on this thread after every tape node a backward runs (nested backwards of
// recomputed layers included): collectives in flight progress inside MPI calls only, so the gradient sync polls
// them from here. Not nested: the newest scope wins until it ends.
class BackwardProgressScope {
 public:
  explicit BackwardProgressScope(std::function<void()> fn);
  ~BackwardProgressScope();
  BackwardProgressScope(const BackwardProgressScope&) = delete;
  BackwardProgressScope& operator=(const BackwardProgressScope&) = delete;

 private:
  std::function<void()> fn_;
  std::function<void()>* prev_;
};

// Turns recording on for its lifetime (a checkpointed layer recomputes with gradients inside backward).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// dst += src (cpu f32, same shape).
void cpu_accumulate(Tensor& dst, const Tensor& src);

// True when recording is on and any of the vars requires a gradient.
bool needs_grad(std::initializer_list<const Var*> inputs);

inline void backward(const Var& loss) {
  Tape::current().backward(loss);
}

}  // namespace myriad::ag
