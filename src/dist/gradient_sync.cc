#include "dist/gradient_sync.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/param_spec.h"

namespace myriad {

// A reduction in flight: first the has-gradient flags of the unit's tensors, then its buckets.
struct GradientSync::InFlight {
  size_t unit = 0;
  std::vector<int32_t> has;
  std::unique_ptr<PendingCollective> flags;
  bool buckets_started = false;
  std::vector<std::vector<const ag::Var*>> members;  // per bucket (plan_buckets)
  std::vector<std::vector<float>> buffers;           // per bucket; empty for one reduced in place
  std::vector<std::unique_ptr<PendingCollective>> pending;
};

GradientSync::GradientSync(const ModelConfig& config, ModelWeights& weights, ProcessGroups& groups,
                           int64_t bucket_bytes)
    : groups_(groups), bucket_floats_(std::max<int64_t>(1, bucket_bytes / int64_t(sizeof(float)))) {
  // model_param_specs' order is the same on every rank: the buckets line up.
  layer_units_.resize(size_t(std::max<int64_t>(0, config.num_hidden_layers)));
  std::vector<std::vector<ag::Var>> dense_of(layer_units_.size() + 1), experts_of(layer_units_.size() + 1);
  for (const ParamSpec& spec : model_param_specs(config)) {
    if (spec.buffer || !weights.contains(spec.name)) continue;
    const ag::Var& v = weights.at(spec.name);
    MYRIAD_CHECK(v.value().dtype() == DType::kF32, "gradient sync: ", spec.name, " is not f32");
    (spec.expert >= 0 ? experts_ : dense_).push_back(v);
    const size_t slot =
        spec.layer >= 0 && spec.layer < int64_t(layer_units_.size()) ? size_t(spec.layer) : layer_units_.size();
    (spec.expert >= 0 ? experts_of : dense_of)[slot].push_back(v);
  }
  for (size_t slot = 0; slot <= layer_units_.size(); ++slot)
    for (bool experts : {false, true}) {
      std::vector<ag::Var>& vars = (experts ? experts_of : dense_of)[slot];
      if (vars.empty()) continue;
      const int64_t layer = slot < layer_units_.size() ? int64_t(slot) : -1;
      if (layer >= 0) layer_units_[slot].push_back(units_.size());
      units_.push_back(Unit{layer, experts, std::move(vars)});
    }
  started_.assign(units_.size(), 0);
  // The overlapped reductions' own communicators (split is collective: every rank, in this order).
  Communicator& world = *groups_.world;
  if (world.size() > 1) {
    dense_flags_ = world.split(0, world.rank());
    dense_data_ = world.split(0, world.rank());
    expert_flags_ = groups_.expert_replicas->split(0, groups_.expert_replicas->rank());
    expert_data_ = groups_.expert_replicas->split(0, groups_.expert_replicas->rank());
  }
}

GradientSync::~GradientSync() = default;

Communicator& GradientSync::data_comm(const Unit& u) const {
  return u.experts ? *expert_data_ : *dense_data_;
}
Communicator& GradientSync::flags_comm(const Unit& u) const {
  return u.experts ? *expert_flags_ : *dense_flags_;
}

void GradientSync::begin_overlap() {
  MYRIAD_CHECK(flight_.empty(), "gradient sync: an overlapped reduction is still in flight");
  overlapping_ = groups_.world->size() > 1;
  std::fill(started_.begin(), started_.end(), 0);
}

void GradientSync::start_unit(size_t unit) {
  if (started_[unit]) return;
  started_[unit] = 1;
  const Unit& u = units_[unit];
  if (data_comm(u).size() == 1) return;
  InFlight& f = flight_.emplace_back();
  f.unit = unit;
  f.has.resize(u.vars.size());
  for (size_t i = 0; i < u.vars.size(); ++i) f.has[i] = u.vars[i].has_grad() ? 1 : 0;
  f.flags = flags_comm(u).start_all_reduce(f.has.data(), int64_t(f.has.size()), DType::kI32, ReduceOp::kMax);
}

std::vector<std::vector<const ag::Var*>> GradientSync::plan_buckets(const std::vector<ag::Var>& vars,
                                                                    const std::vector<int32_t>& has) const {
  std::vector<const ag::Var*> live;
  for (size_t i = 0; i < vars.size(); ++i)
    if (has[i]) {
      (void)vars[i].grad_buffer();  // zeros where this rank has none
      live.push_back(&vars[i]);
    }
  std::vector<std::vector<const ag::Var*>> buckets;
  size_t i = 0;
  while (i < live.size()) {
    if (live[i]->grad().numel() >= bucket_floats_) {  // alone, in place
      buckets.push_back({live[i++]});
      continue;
    }
    std::vector<const ag::Var*>& b = buckets.emplace_back();
    int64_t used = 0;
    while (i < live.size() && live[i]->grad().numel() < bucket_floats_ &&
           used + live[i]->grad().numel() <= bucket_floats_) {
      used += live[i]->grad().numel();
      b.push_back(live[i++]);
    }
  }
  return buckets;
}

bool GradientSync::in_place(const std::vector<const ag::Var*>& bucket) const {
  return bucket.size() == 1 && bucket[0]->grad().numel() >= bucket_floats_;
}

namespace {

// A bucket's gradients copied into one flat buffer (pack) and the sums copied back (unpack).
int64_t pack(const std::vector<const ag::Var*>& bucket, std::vector<float>& buf) {
  int64_t n = 0;
  for (const ag::Var* v : bucket) n += v->grad().numel();
  buf.resize(static_cast<size_t>(n));
  int64_t off = 0;
  for (const ag::Var* v : bucket) {
    const Tensor& g = v->grad();
    std::memcpy(buf.data() + off, g.data<float>(), size_t(g.numel()) * sizeof(float));
    off += g.numel();
  }
  return n;
}

void unpack(const std::vector<const ag::Var*>& bucket, const std::vector<float>& buf) {
  int64_t off = 0;
  for (const ag::Var* v : bucket) {
    const Tensor& g = v->grad();
    std::memcpy(g.data<float>(), buf.data() + off, size_t(g.numel()) * sizeof(float));
    off += g.numel();
  }
}

}  // namespace

void GradientSync::start_buckets(InFlight& f) {
  const Unit& u = units_[f.unit];
  Communicator& comm = data_comm(u);
  f.members = plan_buckets(u.vars, f.has);
  for (const std::vector<const ag::Var*>& b : f.members) {
    std::vector<float>& buf = f.buffers.emplace_back();
    if (in_place(b)) {
      const Tensor& g = b[0]->grad();
      f.pending.push_back(comm.start_all_reduce(g.data<float>(), g.numel(), DType::kF32, ReduceOp::kSum));
    } else {
      const int64_t n = pack(b, buf);
      f.pending.push_back(comm.start_all_reduce(buf.data(), n, DType::kF32, ReduceOp::kSum));
    }
  }
  f.buckets_started = true;
}

void GradientSync::finish_buckets(InFlight& f) {
  for (size_t b = 0; b < f.pending.size(); ++b) {
    f.pending[b]->wait();
    if (!in_place(f.members[b])) unpack(f.members[b], f.buffers[b]);
  }
}

void GradientSync::layer_ready(int64_t layer) {
  if (!overlapping_ || layer < 0 || layer >= int64_t(layer_units_.size())) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t unit : layer_units_[size_t(layer)]) start_unit(unit);
  overlapped_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  poll();
}

void GradientSync::progress() {
  // Between tape nodes, at most every 200 us: each MPI_Test takes OpenMPI's progress locks (a poll after every
  // node cost ~7% of a step in mutexes on the small model).
  if (flight_.empty()) return;
  if (std::chrono::steady_clock::now() - last_poll_ < std::chrono::microseconds(200)) return;
  poll();
}

void GradientSync::poll() {
  if (flight_.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  last_poll_ = t0;
  // Buckets start in flight order (the same on every rank): a unit whose flags are not in yet holds back the
  // units after it.
  for (InFlight& f : flight_) {
    if (f.buckets_started) continue;
    if (!f.flags->test()) break;
    start_buckets(f);
  }
  for (InFlight& f : flight_)
    for (auto& p : f.pending) (void)p->test();
  overlapped_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradientSync::reduce_group(const std::vector<ag::Var>& vars, Communicator& comm) {
  if (comm.size() == 1 || vars.empty()) return;
  // Which tensors have a gradient on some rank: those get one everywhere (zeros where missing).
  std::vector<int32_t> has(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) has[i] = vars[i].has_grad() ? 1 : 0;
  comm.all_reduce_span(std::span<int32_t>(has), ReduceOp::kMax);
  // The buckets one after the other through one buffer (the overlapped path keeps one per bucket in flight).
  for (const std::vector<const ag::Var*>& b : plan_buckets(vars, has)) {
    if (in_place(b)) {
      const Tensor& g = b[0]->grad();
      comm.all_reduce(g.data<float>(), g.numel(), DType::kF32, ReduceOp::kSum);
      continue;
    }
    const int64_t n = pack(b, bucket_);
    comm.all_reduce(bucket_.data(), n, DType::kF32, ReduceOp::kSum);
    unpack(b, bucket_);
  }
}

void GradientSync::all_reduce() {
  const auto t0 = std::chrono::steady_clock::now();
  if (overlapping_) {
    // What no marker started (the tensors outside the layers; every layer of a backward without markers), in
    // unit order, then everything in flight, in order.
    for (size_t unit = 0; unit < units_.size(); ++unit) start_unit(unit);
    for (InFlight& f : flight_) {
      if (!f.buckets_started) {
        f.flags->wait();
        start_buckets(f);
      }
    }
    for (InFlight& f : flight_) finish_buckets(f);
    flight_.clear();
    overlapping_ = false;
  } else {
    reduce_group(dense_, *groups_.world);
    reduce_group(experts_, *groups_.expert_replicas);
  }
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
