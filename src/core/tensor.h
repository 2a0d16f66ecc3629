// Tensor: a strided view over reference-counted storage. Row-major, outermost axis first.
//  - Views (view/reshape of contiguous data, transpose, permute, slice, select) share storage: no copy.
//  - contiguous() copies only when the strides are not already row-major.
//  - Storage comes from the device's allocator (cpu: 64-byte aligned heap; cuda: registered by the CUDA
//    backend), from an Arena (activations; see arena.h), or from foreign memory kept alive by an owner
//    (e.g. an mmap'ed safetensors file: zero-copy).
// Offsets and strides count elements. Block-quantized tensors are stored contiguous and cannot be viewed
// element-wise; they are handled by their own kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace myriad {

class Arena;
using Shape = std::vector<int64_t>;

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::kCPU;
  std::function<void(void*)> release;  // empty: not owned (arena memory)
  std::shared_ptr<const void> owner;   // keeps foreign memory (an mmap) alive
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release && data) release(data);
  }
};

// Allocators per device. The CPU one is built in; the CUDA backend registers its own at start-up.
struct DeviceAllocator {
  virtual ~DeviceAllocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;  // bytes: what allocate() was given
  // Copies between this device and the host (cpu allocator: plain memcpy).
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void memset_zero(void* p, size_t bytes) = 0;
};
void register_allocator(Device device, DeviceAllocator* allocator);
DeviceAllocator* allocator_for(Device device);  // throws kUnsupported when the backend is absent

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::kF32, Device device = Device::kCPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kF32, Device device = Device::kCPU);
  static Tensor full(const Shape& shape, float value);  // f32, cpu
  // Memory from an arena; valid until the arena is reset. No deallocation.
  static Tensor empty_in(Arena& arena, const Shape& shape, DType dtype = DType::kF32);
  // Wraps foreign memory (cpu) without copying; owner keeps it alive.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner);
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return int(shape_.size()); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::kCPU; }
  bool is_contiguous() const;
  size_t nbytes() const;  // bytes of the viewed elements (numel * element size)
  int64_t offset() const { return offset_; }

  // Typed access to the first element (cpu). Checks the dtype.
  template <class T>
  T* data() const;
  void* raw_data() const;  // first viewed element, any device

  // Element access for tests and small tools (cpu, f32/bf16/f16/i32/i64/u8 read as double).
  double at(const std::vector<int64_t>& index) const;
  std::vector<float> to_vector() const;  // any scalar dtype, converted to f32

  // Views: no copy.
  Tensor view(const Shape& shape) const;     // contiguous only; one -1 allowed
  Tensor reshape(const Shape& shape) const;  // view when contiguous, else a contiguous copy
  Tensor transpose(int a, int b) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor slice(int dim, int64_t start, int64_t end) const;  // [start, end)
  Tensor select(int dim, int64_t index) const;              // drops dim

  // Copies.
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;       // scalar types; f32 <-> bf16/f16/i32/i64/u8
  Tensor to(Device device) const;     // copy across devices (contiguous result)
  void copy_from(const Tensor& src);  // same shape; dtype converted; strided allowed on cpu
  void fill(float value);
  void zero();

  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);  // throws on negative dims or overflow

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<uint16_t> {  // bf16 and f16 share the carrier type; data<uint16_t>() accepts both
  static constexpr DType value = DType::kBF16;
};

template <class T>
T* Tensor::data() const {
  MYRIAD_CHECK(defined(), "data() on an undefined tensor");
  MYRIAD_CHECK(device() == Device::kCPU, "data<T>() needs a cpu tensor");
  if constexpr (std::is_same_v<T, uint16_t>) {
    MYRIAD_CHECK(dtype_ == DType::kBF16 || dtype_ == DType::kF16, "dtype is ", dtype_name(dtype_));
  } else {
    MYRIAD_CHECK(dtype_ == DTypeOf<T>::value, "data<", dtype_name(DTypeOf<T>::value), ">() on a ", dtype_name(dtype_),
                 " tensor");
  }
  return static_cast<T*>(raw_data());
}

}  // namespace myriad
