// ggml's block quantization formats Q8_0 and Q4_0 (what GGUF files carry; myriad's own q8 / q4 in quant/quant.h
// are stored differently: codes and scales in separate tensors). Blocks of 32 consecutive values of a row:
//   Q8_0: f16 d, int8 q[32]                x = d q;       d = amax / 127, q = round(x / d) (half away from 0)
//   Q4_0: f16 d, u8 qs[16] (two codes)     x = d (q - 8); d = m / -8 with m the value of largest |x| (the first
//                                          such), q = min(15, trunc(x / d + 8.5)); qs[j] = q[j] | q[j + 16] << 4
// The arithmetic is ggml's reference quantizer's (quantize_row_q8_0_ref / _q4_0_ref: multiply by the f32 1/d,
// store d as f16), so the bytes equal those of ggml and of the gguf Python package (tests/interop).
#pragma once

#include <cstdint>
#include <string>

namespace myriad {

// n values (a multiple of 32) into n / 32 blocks appended to out.
void quantize_q8_0(const float* x, int64_t n, std::string& out);
void quantize_q4_0(const float* x, int64_t n, std::string& out);

}  // namespace myriad
