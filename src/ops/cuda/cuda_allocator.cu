// Device discovery, init(), synchronize() and the CUDA DeviceAllocator (cudaMalloc / cudaFree / cudaMemcpy /
// cudaMemset) that core uses for Device::kCUDA tensors. Plain cudaMalloc per tensor for now: a caching pool
// (or arenas on device memory) comes later, when profiles ask for it.
#include <mutex>
#include <string>

#include "core/log.h"
#include "core/tensor.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_common.cuh"

namespace myriad::cuda {

namespace detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call is not blamed for this one
  const ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::kOutOfMemory : ErrorKind::kUnsupported;
  throw_error(kind, "CUDA: ", call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") at ", file,
              ":", line);
}

}  // namespace detail

namespace {

struct Probe {
  bool ok = false;
  std::string reason;  // why not, when !ok
};

// Asked once: the answer does not change while the process runs.
const Probe& probe() {
  static const Probe p = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return Probe{false,
                   str("cudaGetDeviceCount failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")")};
    }
    if (n == 0) return Probe{false, "cudaGetDeviceCount found no device"};
    return Probe{true, ""};
  }();
  return p;
}

class CudaAllocator final : public DeviceAllocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    // At least one byte, like the cpu allocator: every tensor gets its own non-null pointer.
    const cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      MYRIAD_REQUIRE(err != cudaErrorMemoryAllocation, kOutOfMemory, "CUDA: cudaMalloc of ", bytes,
                     " bytes failed: out of device memory");
      detail::throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    }
    return p;
  }

  // Called from Storage's destructor, so it must not throw. At process exit the runtime may already be unloaded
  // when the last static tensors die; that is not worth a message.
  void deallocate(void* p, size_t /*bytes*/) override {
    const cudaError_t err = cudaFree(p);
    if (err == cudaSuccess || err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed) return;
    (void)cudaGetLastError();
    try {
      log_warn("CUDA: cudaFree failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
    } catch (...) {
    }
  }

  // cudaMemcpy on the legacy default stream: ordered after every queued kernel, and the host waits for it.
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) MYRIAD_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) MYRIAD_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void memset_zero(void* p, size_t bytes) override {
    if (bytes > 0) MYRIAD_CUDA_CHECK(cudaMemset(p, 0, bytes));
  }
};

CudaAllocator g_allocator;
std::once_flag g_registered;

}  // namespace

bool available() {
  return probe().ok;
}

void init() {
  MYRIAD_REQUIRE(probe().ok, kUnsupported, "CUDA backend: no usable CUDA device (", probe().reason, ")");
  std::call_once(g_registered, [] {
    // Creates the context now, so a broken driver or device shows up here rather than in the first kernel.
    // A throw leaves the flag unset: a later init() tries again.
    MYRIAD_CUDA_CHECK(cudaFree(nullptr));
    register_allocator(Device::kCUDA, &g_allocator);
  });
}

void synchronize() {
  MYRIAD_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace myriad::cuda
