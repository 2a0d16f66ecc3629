// The communicator (docs/design.md §4, issue 16): the collectives parallel training and serving need, behind one
// interface over the standard engines. MpiCommunicator (dist/mpi_communicator.h) runs CPU ranks over OpenMPI;
// SingleCommunicator is the one-process default (every collective is the identity or a copy). GPU ranks will
// get an NCCL one when a rank can hold its model on a GPU (device() says where the buffers live). The model never sees
// a communicator: parallelism reaches it through the MoE-dispatch and sequence-context seams (model/moe_dispatch.h,
// model/sequence_context.h), and the trainer all-reduces gradients and statistics.
//
// Buffers live on device(): host memory for single and MPI. Counts are elements of the
// dtype. Every call is collective: all ranks of the communicator make it, in the same order, with matching
// counts; a mismatch is undefined behaviour in MPI, so the callers derive counts from state that
// is equal on all ranks (or exchange the counts first, as all_to_all_v's callers do).
//
// Non-blocking: start_all_reduce returns a PendingCollective (the gradient buckets reduced while the backward pass
// goes on, dist/gradient_sync.h). MPI progresses it only inside MPI calls, so its owner calls test() now and then
// (between tape nodes). The buffer must stay untouched until the collective completed.
// Leaves out: point-to-point sends.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

namespace myriad {

enum class ReduceOp { kSum, kMax, kMin };

// Bytes of count elements of a scalar dtype (block types are refused: collectives reduce elements).
int64_t collective_bytes(DType dtype, int64_t count);

// A collective in flight. test(): whether it completed (and makes progress); wait(): until it completed. Every
// PendingCollective must be waited for (or test() true) before its buffer is read or the object is destroyed.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// One that was complete when it was made (a blocking implementation's).
class CompletedCollective final : public PendingCollective {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "single", "mpi"
  virtual Device device() const = 0;        // where the buffers of the collectives live

  // buf [count] in place: the element-wise reduction over the ranks.
  virtual void all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) = 0;
  // The same, started: buf must stay untouched until the returned collective completed. Collectives in flight on
  // one communicator must be started in the same order on every rank. Default: the blocking all_reduce.
  virtual std::unique_ptr<PendingCollective> start_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
    all_reduce(buf, count, dtype, op);
    return std::make_unique<CompletedCollective>();
  }
  // Host doubles [count] in place, whatever device() is: the step's statistics (losses, squared norms), which
  // f32 would round. (DType has no F64: tensors never are.)
  virtual void all_reduce_f64(double* buf, int64_t count, ReduceOp op) = 0;
  // send [size() * count] -> recv [count]: rank r receives the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) = 0;
  // send [count] -> recv [size() * count], rank r's block at r * count.
  virtual void all_gather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // send [count] -> recv [sum of counts], rank r's block first after ranks < r; counts [size()] equal on all.
  virtual void all_gather_v(const void* send, void* recv, std::span<const int64_t> counts, DType dtype) = 0;
  // Each rank sends send_counts[p] elements to rank p (blocks packed in rank order) and receives recv_counts[p]
  // from rank p (packed likewise); recv_counts[p] on this rank must equal send_counts[this rank] on rank p.
  virtual void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                            std::span<const int64_t> recv_counts, DType dtype) = 0;
  virtual void broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  // The same, for a wait that may be long by design (an idle server's followers): sleeps between checks instead
  // of keeping a core busy. Every rank of one such broadcast must call this form (MPI does not match blocking
  // with non-blocking collectives). Default: broadcast.
  virtual void broadcast_idle(void* buf, int64_t count, DType dtype, int root) { broadcast(buf, count, dtype, root); }
  virtual void barrier() = 0;
  // The ranks with the same color form a new communicator, ordered by key (then by rank here).
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;

  // Typed conveniences (host communicators).
  template <class T>
  void all_reduce_span(std::span<T> v, ReduceOp op = ReduceOp::kSum) {
    all_reduce(v.data(), int64_t(v.size()), dtype_of<T>(), op);
  }
  template <class T>
  T all_reduce_value(T v, ReduceOp op = ReduceOp::kSum) {
    if constexpr (std::is_same_v<T, double>)
      all_reduce_f64(&v, 1, op);
    else
      all_reduce(&v, 1, dtype_of<T>(), op);
    return v;
  }
  // Each rank's vector (any length), concatenated in rank order.
  template <class T>
  std::vector<T> all_gather_vector(std::span<const T> mine) {
    std::vector<int64_t> counts(static_cast<size_t>(size()));
    const int64_t n = int64_t(mine.size());
    all_gather(&n, counts.data(), 1, DType::kI64);
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    std::vector<T> out(static_cast<size_t>(total));
    all_gather_v(mine.data(), out.data(), counts, dtype_of<T>());
    return out;
  }

  template <class T>
  static constexpr DType dtype_of();
};

template <>
constexpr DType Communicator::dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType Communicator::dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType Communicator::dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType Communicator::dtype_of<uint8_t>() {
  return DType::kU8;
}

// One process: every collective is the identity (or a copy from send to recv).
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "single"; }
  Device device() const override { return Device::kCPU; }
  void all_reduce(void*, int64_t count, DType dtype, ReduceOp) override { collective_bytes(dtype, count); }
  void all_reduce_f64(double*, int64_t, ReduceOp) override {}
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp) override;
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override;
  void all_gather_v(const void* send, void* recv, std::span<const int64_t> counts, DType dtype) override;
  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype) override;
  void broadcast(void*, int64_t, DType, int root) override;
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) const override { return std::make_unique<SingleCommunicator>(); }
};

}  // namespace myriad
