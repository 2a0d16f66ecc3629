#include "core/dtype.h"

#include <cmath>

namespace myriad {

namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kF32, "F32", 1, 4},     {DType::kBF16, "BF16", 1, 2},      {DType::kF16, "F16", 1, 2},
    {DType::kI32, "I32", 1, 4},     {DType::kI64, "I64", 1, 8},        {DType::kU8, "U8", 1, 1},
    {DType::kQ8_0, "Q8_0", 32, 34}, {DType::kQ4_0, "Q4_0", 32, 18},    {DType::kMXFP4, "MXFP4", 32, 17},
    {DType::kI8, "I8", 1, 1},       {DType::kF8E8M0, "F8_E8M0", 1, 1},
};
const DTypeInfo& info(DType d) {
  return kInfo[static_cast<int>(d)];
}
}  // namespace

const char* dtype_name(DType dtype) {
  return info(dtype).name;
}
int64_t dtype_block_bytes(DType dtype) {
  return info(dtype).block_bytes;
}
bool dtype_is_quantized(DType dtype) {
  return info(dtype).block_elems > 1;
}
const char* device_name(Device device) {
  return device == Device::kCPU ? "cpu" : "cuda";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.name) return i.dtype;
  return std::nullopt;
}

std::optional<uint64_t> dtype_bytes(DType dtype, uint64_t numel) {
  const auto& i = info(dtype);
  if (numel % uint64_t(i.block_elems) != 0) return std::nullopt;
  return checked_mul(numel / uint64_t(i.block_elems), uint64_t(i.block_bytes));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(float(man), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                  // below 2^-14: subnormal or zero
    float a;
    std::memcpy(&a, &abs, 4);
    // round to nearest even in units of 2^-24
    const float scaled = a * 16777216.0f;  // exact: power-of-two scaling
    return uint16_t(sign | uint16_t(std::nearbyint(scaled)));
  }
  // normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even
  uint32_t r = abs - 0x38000000u;  // exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | uint16_t(r >> 13));
}

}  // namespace myriad
