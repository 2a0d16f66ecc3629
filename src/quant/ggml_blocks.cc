// ggml's Q8_0 / Q4_0 blocks. See ggml_blocks.h.
#include "quant/ggml_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace myriad {

namespace {

constexpr int64_t kBlock = 32;

void put_half(std::string& out, float d) {
  const uint16_t h = f32_to_f16(d);
  char b[2];
  std::memcpy(b, &h, 2);
  out.append(b, 2);
}

void check(int64_t n) {
  MYRIAD_REQUIRE(n >= 0 && n % kBlock == 0, kValue, "ggml block quantization of ", n,
                 " values: must be a multiple of 32");
}

}  // namespace

void quantize_q8_0(const float* x, int64_t n, std::string& out) {
  check(n);
  out.reserve(out.size() + size_t(n / kBlock * 34));
  for (int64_t b = 0; b < n; b += kBlock) {
    float amax = 0.0f;
    for (int64_t j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(out, d);
    for (int64_t j = 0; j < kBlock; ++j) out += char(int8_t(std::round(x[b + j] * id)));
  }
}

void quantize_q4_0(const float* x, int64_t n, std::string& out) {
  check(n);
  out.reserve(out.size() + size_t(n / kBlock * 18));
  for (int64_t b = 0; b < n; b += kBlock) {
    float amax = 0.0f, m = 0.0f;
    for (int64_t j = 0; j < kBlock; ++j)
      if (amax < std::fabs(x[b + j])) {
        amax = std::fabs(x[b + j]);
        m = x[b + j];
      }
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(out, d);
    auto code = [&](int64_t j) { return uint8_t(std::min(15, int(x[b + j] * id + 8.5f))); };
    for (int64_t j = 0; j < kBlock / 2; ++j) out += char(code(j) | (code(j + kBlock / 2) << 4));
  }
}

}  // namespace myriad
