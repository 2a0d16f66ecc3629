#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/arena.h"
#include "core/block_cache.h"
#include "core/memory_profile.h"

namespace myriad {

namespace {

struct CpuAllocator final : DeviceAllocator {
  // Recycled through the block cache: decode and training steps allocate the same shapes every step.
  void* allocate(size_t bytes) override { return HostBlockCache::global().allocate(bytes); }
  void deallocate(void* p, size_t bytes) override { HostBlockCache::global().deallocate(p, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void memset_zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
};

CpuAllocator g_cpu_allocator;
DeviceAllocator* g_allocators[2] = {&g_cpu_allocator, nullptr};

size_t element_bytes(DType dtype) {
  MYRIAD_CHECK(!dtype_is_quantized(dtype), "element access to block-quantized ", dtype_name(dtype));
  return size_t(dtype_block_bytes(dtype));
}

int normalize_dim(int dim, int ndim, const char* op) {
  const int d = dim < 0 ? dim + ndim : dim;
  MYRIAD_REQUIRE(d >= 0 && d < ndim, kShape, op, ": dim ", dim, " out of range for a ", ndim, "-d tensor");
  return d;
}

// Reads/writes one element of any scalar dtype as double.
double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(base)[i];
    case DType::kI64:
      return double(static_cast<const int64_t*>(base)[i]);
    case DType::kU8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::kI8:
      return static_cast<const int8_t*>(base)[i];
    case DType::kF8E8M0: {
      const uint8_t e = static_cast<const uint8_t*>(base)[i];
      return e == 255 ? std::nan("") : std::ldexp(1.0, int(e) - 127);
    }
    default:
      MYRIAD_CHECK(false, "no element access for ", dtype_name(dtype));
  }
  return 0;
}
void store_from_double(void* base, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(base)[i] = float(v);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(float(v));
      return;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16(float(v));
      return;
    case DType::kI32:
      static_cast<int32_t*>(base)[i] = int32_t(v);
      return;
    case DType::kI64:
      static_cast<int64_t*>(base)[i] = int64_t(v);
      return;
    case DType::kU8:
      static_cast<uint8_t*>(base)[i] = uint8_t(v);
      return;
    default:
      MYRIAD_CHECK(false, "no element access for ", dtype_name(dtype));
  }
}

// Visits every element offset of a strided view in row-major order.
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, int64_t offset, F&& f) {
  const int nd = int(shape.size());
  if (shape_numel(shape) == 0) return;
  std::vector<int64_t> idx(nd, 0);
  int64_t off = offset;
  while (true) {
    f(off);
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void register_allocator(Device device, DeviceAllocator* allocator) {
  g_allocators[static_cast<int>(device)] = allocator;
}

DeviceAllocator* allocator_for(Device device) {
  DeviceAllocator* a = g_allocators[static_cast<int>(device)];
  MYRIAD_REQUIRE(a != nullptr, kUnsupported, "device ", device_name(device),
                 " is not available (built without its backend, or no device present)");
  return a;
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

int64_t shape_numel(const Shape& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    MYRIAD_REQUIRE(d >= 0, kShape, "negative dimension in shape ", shape_str(shape));
    auto m = checked_mul(n, uint64_t(d));
    MYRIAD_REQUIRE(m && *m < (uint64_t(1) << 62), kShape, "shape ", shape_str(shape), " overflows");
    n = *m;
  }
  return int64_t(n);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const int64_t n = shape_numel(shape);
  auto bytes = dtype_bytes(dtype, uint64_t(n));
  MYRIAD_REQUIRE(bytes.has_value(), kShape, "shape ", shape_str(shape), " is not a whole number of ", dtype_name(dtype),
                 " blocks");
  DeviceAllocator* alloc = allocator_for(device);
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = alloc->allocate(*bytes);
  t.storage_->bytes = *bytes;
  t.storage_->device = device;
  const int charged = memory_profile::charge(*bytes);
  if (charged < 0) {
    t.storage_->release = [alloc, n = *bytes](void* p) { alloc->deallocate(p, n); };
  } else {
    t.storage_->release = [alloc, n = *bytes, charged](void* p) {
      memory_profile::release(charged, n);
      alloc->deallocate(p, n);
    };
  }
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  allocator_for(device)->memset_zero(t.storage_->data, t.storage_->bytes);
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  std::fill_n(t.data<float>(), t.numel(), value);
  return t;
}

Tensor Tensor::empty_in(Arena& arena, const Shape& shape, DType dtype) {
  const int64_t n = shape_numel(shape);
  auto bytes = dtype_bytes(dtype, uint64_t(n));
  MYRIAD_REQUIRE(bytes.has_value(), kShape, "shape ", shape_str(shape), " is not whole ", dtype_name(dtype), " blocks");
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = arena.allocate(*bytes);
  t.storage_->bytes = *bytes;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner) {
  const int64_t n = shape_numel(shape);
  auto bytes = dtype_bytes(dtype, uint64_t(n));
  MYRIAD_REQUIRE(bytes.has_value(), kShape, "shape ", shape_str(shape), " is not whole ", dtype_name(dtype), " blocks");
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = data;
  t.storage_->bytes = *bytes;
  t.storage_->owner = std::move(owner);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

template <class T>
static Tensor from_vector_impl(const std::vector<T>& values, const Shape& shape) {
  MYRIAD_REQUIRE(int64_t(values.size()) == shape_numel(shape), kShape, "from_vector: ", values.size(),
                 " values do not fill shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape, DTypeOf<T>::value);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s) {
  return from_vector_impl(v, s);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& v, const Shape& s) {
  return from_vector_impl(v, s);
}
Tensor Tensor::from_vector(const std::vector<int32_t>& v, const Shape& s) {
  return from_vector_impl(v, s);
}

int64_t Tensor::size(int dim) const {
  return shape_[normalize_dim(dim, ndim(), "size")];
}
int64_t Tensor::numel() const {
  return shape_numel(shape_);
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

size_t Tensor::nbytes() const {
  return *dtype_bytes(dtype_, uint64_t(numel()));
}

void* Tensor::raw_data() const {
  MYRIAD_CHECK(defined(), "raw_data() on an undefined tensor");
  if (offset_ == 0) return storage_->data;
  return static_cast<char*>(storage_->data) + offset_ * int64_t(element_bytes(dtype_));
}

double Tensor::at(const std::vector<int64_t>& index) const {
  MYRIAD_REQUIRE(int(index.size()) == ndim(), kShape, "at: index of rank ", index.size(), " for shape ",
                 shape_str(shape_));
  int64_t off = 0;
  for (int i = 0; i < ndim(); ++i) {
    MYRIAD_REQUIRE(index[i] >= 0 && index[i] < shape_[i], kShape, "at: index ", shape_str(index),
                   " out of range for shape ", shape_str(shape_));
    off += index[i] * strides_[i];
  }
  MYRIAD_CHECK(device() == Device::kCPU, "at() needs a cpu tensor");
  return load_as_double(raw_data(), dtype_, off);
}

std::vector<float> Tensor::to_vector() const {
  MYRIAD_CHECK(device() == Device::kCPU, "to_vector() needs a cpu tensor");
  std::vector<float> out;
  out.reserve(size_t(numel()));
  const void* base = storage_->data;
  for_each_offset(shape_, strides_, offset_,
                  [&](int64_t off) { out.push_back(float(load_as_double(base, dtype_, off))); });
  return out;
}

Tensor Tensor::view(const Shape& shape) const {
  MYRIAD_REQUIRE(is_contiguous(), kShape, "view: tensor of shape ", shape_str(shape_),
                 " is not contiguous (use reshape)");
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < int(s.size()); ++i) {
    if (s[i] == -1) {
      MYRIAD_REQUIRE(infer < 0, kShape, "view: more than one -1 in ", shape_str(shape));
      infer = i;
    } else {
      MYRIAD_REQUIRE(s[i] >= 0, kShape, "view: negative size in ", shape_str(shape));
      known *= s[i];
    }
  }
  const int64_t n = numel();
  if (infer >= 0) {
    MYRIAD_REQUIRE(known > 0 && n % known == 0, kShape, "view: cannot infer -1 in ", shape_str(shape), " from ",
                   shape_str(shape_));
    s[infer] = n / known;
    known *= s[infer];
  }
  MYRIAD_REQUIRE(known == n, kShape, "view: shape ", shape_str(shape), " does not match ", shape_str(shape_), " (", n,
                 " elements)");
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  return is_contiguous() ? view(shape) : contiguous().view(shape);
}

Tensor Tensor::transpose(int a, int b) const {
  a = normalize_dim(a, ndim(), "transpose");
  b = normalize_dim(b, ndim(), "transpose");
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  MYRIAD_REQUIRE(int(order.size()) == ndim(), kShape, "permute: ", order.size(), " axes for a ", ndim(), "-d tensor");
  std::vector<bool> seen(order.size(), false);
  Tensor t = *this;
  for (int i = 0; i < ndim(); ++i) {
    const int d = normalize_dim(order[i], ndim(), "permute");
    MYRIAD_REQUIRE(!seen[d], kShape, "permute: axis ", d, " repeated");
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  const int d = normalize_dim(dim, ndim(), "slice");
  MYRIAD_REQUIRE(0 <= start && start <= end && end <= shape_[d], kShape, "slice: [", start, ", ", end,
                 ") out of range for dim ", d, " of ", shape_str(shape_));
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  const int d = normalize_dim(dim, ndim(), "select");
  MYRIAD_REQUIRE(0 <= index && index < shape_[d], kShape, "select: index ", index, " out of range for dim ", d, " of ",
                 shape_str(shape_));
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, Device::kCPU);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor src = device() == Device::kCPU ? contiguous() : *this;
  MYRIAD_REQUIRE(src.is_contiguous(), kUnsupported, "to(device): strided device tensors must be made contiguous first");
  Tensor out = empty(shape_, dtype_, dev);
  if (dev == Device::kCPU)
    allocator_for(device())->copy_to_host(out.raw_data(), src.raw_data(), nbytes());
  else
    allocator_for(dev)->copy_from_host(out.raw_data(), src.raw_data(), nbytes());
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  MYRIAD_REQUIRE(src.shape_ == shape_, kShape, "copy_from: source shape ", shape_str(src.shape_),
                 " differs from destination shape ", shape_str(shape_));
  if (device() != Device::kCPU || src.device() != Device::kCPU) {
    MYRIAD_REQUIRE(dtype_ == src.dtype_ && is_contiguous() && src.is_contiguous(), kUnsupported,
                   "copy_from across devices needs equal dtypes and contiguous tensors");
    if (src.device() == Device::kCPU)
      allocator_for(device())->copy_from_host(raw_data(), src.raw_data(), nbytes());
    else if (device() == Device::kCPU)
      allocator_for(src.device())->copy_to_host(raw_data(), src.raw_data(), nbytes());
    else
      allocator_for(device())->copy_from_host(raw_data(), src.to(Device::kCPU).raw_data(), nbytes());
    return;
  }
  if (dtype_ == src.dtype_ && is_contiguous() && src.is_contiguous()) {
    if (numel() > 0) std::memmove(raw_data(), src.raw_data(), nbytes());
    return;
  }
  std::vector<int64_t> src_offsets;
  src_offsets.reserve(size_t(numel()));
  for_each_offset(src.shape_, src.strides_, src.offset_, [&](int64_t o) { src_offsets.push_back(o); });
  size_t i = 0;
  void* dst_base = storage_->data;
  const void* src_base = src.storage_->data;
  for_each_offset(shape_, strides_, offset_, [&](int64_t o) {
    store_from_double(dst_base, dtype_, o, load_as_double(src_base, src.dtype_, src_offsets[i++]));
  });
}

void Tensor::fill(float value) {
  if (device() != Device::kCPU) {
    MYRIAD_REQUIRE(value == 0.0f && is_contiguous(), kUnsupported, "fill on a device tensor supports zero only");
    allocator_for(device())->memset_zero(raw_data(), nbytes());
    return;
  }
  void* base = storage_->data;
  for_each_offset(shape_, strides_, offset_, [&](int64_t o) { store_from_double(base, dtype_, o, value); });
}

void Tensor::zero() {
  if (is_contiguous() && !dtype_is_quantized(dtype_)) {
    if (numel() > 0) allocator_for(device())->memset_zero(raw_data(), nbytes());
  } else {
    fill(0.0f);
  }
}

}  // namespace myriad
