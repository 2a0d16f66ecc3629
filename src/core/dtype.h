// Element types and devices. Scalar types have one element per "block"; the block-quantized types
// (reserved here, implemented by the quantization work) pack 32 elements with their scale into one block,
// so every size computation goes through dtype_bytes(dtype, numel), which is overflow-checked.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace myriad {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kI32,
  kI64,
  kU8,
  // Block-quantized weight types (group 32). Reserved: layouts are fixed here so files stay stable.
  kQ8_0,   // 32 x int8 + f16 scale            = 34 bytes per block
  kQ4_0,   // 32 x 4-bit + f16 scale           = 18 bytes per block
  kMXFP4,  // 32 x E2M1 (4-bit) + E8M0 scale   = 17 bytes per block
  // Stored by other tools (read, not computed with): int8, and OCP's E8M0 scale byte (2^(e-127); 255 NaN), as
  // compressed-tensors' MXFP4 checkpoints (K3's routed experts) keep their block scales.
  kI8,
  kF8E8M0,
};

enum class Device : uint8_t { kCPU, kCUDA };

const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> dtype_from_name(std::string_view name);
int64_t dtype_block_bytes(DType dtype);  // bytes of one block (= element size for scalar types)
bool dtype_is_quantized(DType dtype);
const char* device_name(Device device);

// Bytes for numel elements; nullopt on overflow or on a numel that is not a whole number of blocks.
std::optional<uint64_t> dtype_bytes(DType dtype, uint64_t numel);

// Overflow-checked a*b for sizes read from untrusted files.
inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// bf16 / f16 <-> f32. bf16 rounds to nearest even; f16 handles subnormals, inf and NaN.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace myriad
