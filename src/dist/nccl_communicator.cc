#include "dist/nccl_communicator.h"

#include "core/error.h"

#if MYRIAD_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>
#endif

namespace myriad {

#if MYRIAD_WITH_CUDA

namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) throw_error(ErrorKind::kIo, "NCCL ", what, " failed: ", ncclGetErrorString(rc));
}
void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw_error(ErrorKind::kIo, "CUDA ", what, " failed: ", cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
    default:
      throw_error(ErrorKind::kUnsupported, "NCCL collectives: no NCCL type for ", dtype_name(dtype));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// An all-reduce enqueued on the communicator's stream, marked by an event recorded after it.
class NcclPending final : public PendingCollective {
 public:
  explicit NcclPending(cudaStream_t stream) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "event create");
    check_cuda(cudaEventRecord(event_, stream), "event record");
  }
  ~NcclPending() override {
    if (event_) cudaEventDestroy(event_);
  }
  bool test() override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    check_cuda(e, "all_reduce (started)");
    return true;
  }
  void wait() override { check_cuda(cudaEventSynchronize(event_), "all_reduce (started)"); }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device) : comm_(comm), device_(device) {
    check_cuda(cudaSetDevice(device_), "set device");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream create");
    check_nccl(ncclCommUserRank(comm_, &rank_), "comm rank");
    check_nccl(ncclCommCount(comm_, &size_), "comm count");
  }
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device::kCUDA; }

  void all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    check_nccl(ncclAllReduce(buf, buf, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream_), "all_reduce");
    wait("all_reduce");
  }
  std::unique_ptr<PendingCollective> start_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    check_nccl(ncclAllReduce(buf, buf, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream_), "all_reduce");
    return std::make_unique<NcclPending>(stream_);
  }
  void all_reduce_f64(double* buf, int64_t count, ReduceOp op) override {
    // Host statistics: through a device scratch buffer (a few doubles per step).
    double* dev = nullptr;
    const size_t bytes = size_t(count) * sizeof(double);
    check_cuda(cudaMalloc(&dev, bytes), "malloc");
    check_cuda(cudaMemcpyAsync(dev, buf, bytes, cudaMemcpyHostToDevice, stream_), "copy in");
    check_nccl(ncclAllReduce(dev, dev, size_t(count), ncclFloat64, nccl_op(op), comm_, stream_), "all_reduce (f64)");
    check_cuda(cudaMemcpyAsync(buf, dev, bytes, cudaMemcpyDeviceToHost, stream_), "copy out");
    wait("all_reduce (f64)");
    check_cuda(cudaFree(dev), "free");
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    check_nccl(ncclReduceScatter(send, recv, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream_),
               "reduce_scatter");
    wait("reduce_scatter");
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    check_nccl(ncclAllGather(send, recv, size_t(count), nccl_type(dtype), comm_, stream_), "all_gather");
    wait("all_gather");
  }
  void all_gather_v(const void* send, void* recv, std::span<const int64_t> counts, DType dtype) override {
    // NCCL has no variable all-gather: one broadcast per root, grouped into one launch.
    MYRIAD_REQUIRE(int(counts.size()) == size_, kValue, "all_gather_v: ", counts.size(), " counts for ", size_,
                   " ranks");
    const int64_t esz = collective_bytes(dtype, 1);
    check_nccl(ncclGroupStart(), "group start");
    int64_t at = 0;
    for (int p = 0; p < size_; ++p) {
      char* dst = static_cast<char*>(recv) + at * esz;
      check_nccl(
          ncclBroadcast(p == rank_ ? send : dst, dst, size_t(counts[size_t(p)]), nccl_type(dtype), p, comm_, stream_),
          "all_gather_v");
      at += counts[size_t(p)];
    }
    check_nccl(ncclGroupEnd(), "group end");
    wait("all_gather_v");
  }
  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype) override {
    MYRIAD_REQUIRE(int(send_counts.size()) == size_ && int(recv_counts.size()) == size_, kValue,
                   "all_to_all_v: counts for ", size_, " ranks");
    const int64_t esz = collective_bytes(dtype, 1);
    check_nccl(ncclGroupStart(), "group start");
    int64_t s_at = 0, r_at = 0;
    for (int p = 0; p < size_; ++p) {
      check_nccl(ncclSend(static_cast<const char*>(send) + s_at * esz, size_t(send_counts[size_t(p)]), nccl_type(dtype),
                          p, comm_, stream_),
                 "all_to_all_v send");
      check_nccl(ncclRecv(static_cast<char*>(recv) + r_at * esz, size_t(recv_counts[size_t(p)]), nccl_type(dtype), p,
                          comm_, stream_),
                 "all_to_all_v recv");
      s_at += send_counts[size_t(p)];
      r_at += recv_counts[size_t(p)];
    }
    check_nccl(ncclGroupEnd(), "group end");
    wait("all_to_all_v");
  }
  void broadcast(void* buf, int64_t count, DType dtype, int root) override {
    check_nccl(ncclBroadcast(buf, buf, size_t(count), nccl_type(dtype), root, comm_, stream_), "broadcast");
    wait("broadcast");
  }
  void barrier() override {
    // NCCL has no barrier: an all-reduce of one element is one.
    float* one = nullptr;
    check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&one), sizeof(float), stream_), "malloc");
    check_nccl(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier");
    check_cuda(cudaFreeAsync(one, stream_), "free");
    wait("barrier");
  }
  std::unique_ptr<Communicator> split(int color, int key) const override {
    ncclComm_t sub;
    check_nccl(ncclCommSplit(comm_, color, key, &sub, nullptr), "comm split");
    return std::make_unique<NcclCommunicator>(sub, device_);
  }

 private:
  void wait(const char* what) { check_cuda(cudaStreamSynchronize(stream_), what); }
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool nccl_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, int device_index) {
  MYRIAD_REQUIRE(nccl_available(), kUnsupported, "NCCL: no GPU is visible to this process");
  check_cuda(cudaSetDevice(device_index), "set device");
  ncclUniqueId id;
  if (host.rank() == 0) check_nccl(ncclGetUniqueId(&id), "get unique id");
  host.broadcast(&id, int64_t(sizeof id), DType::kU8, 0);
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, host.size(), id, host.rank()), "comm init");
  return std::make_unique<NcclCommunicator>(comm, device_index);
}

#else

bool nccl_available() {
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int) {
  throw_error(ErrorKind::kUnsupported, "NCCL: this build has no CUDA backend (configure with --preset cuda)");
}

#endif

}  // namespace myriad
