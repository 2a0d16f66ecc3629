// An int8 page of an MLA latent cache (MlaCache with DType::kQ8_0), its layout, and the ops over it (the two decode
// products among them), dispatched like the rest of the kernel table (ops/kernels.h); CPU kernels in
// ops/cpu/latent_q8.cc.
//
// A cached row is [c_kv | k_pe] (W = C + Dr floats). Each row is quantized per group of 32 columns (group g holds
// columns [32 g, 32 g + 32) of the row, the last one possibly shorter) to int8 codes c = round(x / s) in
// [-127, 127] with s = max|x| / 127, so |x - s c| <= s / 2. Why int8: at long context decode reads the whole cache
// every token for H products per row (scores and values); f32 products run at the FMA rate whatever the storage,
// while int8 dot products (AVX512-VNNI) do 4x the multiply-adds per instruction, and the page is a quarter of the
// bytes. The codes are stored twice, each in the order one product wants:
//   keys    [blocks of 16 tokens][W/4 quads][16 tokens][4 columns] u8 = c + 128: one 64-byte load is 16 tokens x 4
//           columns, what vpdpbusd dots against 4 query bytes broadcast (scores of 16 tokens per instruction, no
//           horizontal sums). All W columns.
//   values  [token pairs][Cv columns][2 tokens] s8 (Cv = C rounded up to 32): 32 bytes widened to 16-bit are 16
//           columns x 2 tokens, what vpdpwssd dots against 2 probabilities broadcast. The first C columns only.
//   scales  [groups][blocks * 16 tokens] f32: s of (token, group); 16 tokens of one group in one load.
// Padding (columns past W or C, rows past the page's tokens) holds code 0 and scale 0. Bytes per token:
// 4 ceil(W/4) + Cv + 4 G for G = ceil(W/32) groups (C = 128, Dr = 32: 308, against 640 for f32 rows).
//
// Products (single-threaded; the decoder splits the pages over threads):
//   scores: S[h, j] = sum_g dq[h, g] s[j, g] sum_{d in g} q[h, d] c[j, d], the query rows quantized the same way
//           (per head and group, LatentQ8Query). Integer sums exact; f32 only for the group scales.
//   values: o[h, :C] += sum_j p[h, j] s[j, g(col)] c[j, col]: per head and group the factors p s are rounded to
//           16 bits against their largest value in the page (relative error <= 2^-16 of it: negligible next to the
//           codes' own rounding), the sums exact in int32 up to 256 tokens at a time.
// With AVX512-VNNI + BW compiled in (latent_q8_native()) both use those instructions; elsewhere portable loops
// with the same integer sums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace myriad {

constexpr int64_t kLatentQ8Group = 32;  // columns per quantization group
constexpr int64_t kLatentQ8Block = 16;  // tokens per key block (one 512-bit load)

struct LatentQ8Layout {
  LatentQ8Layout(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens);

  int64_t C, W, P;                                           // value columns, row width, tokens per page
  int64_t quads;                                             // ceil(W / 4)
  int64_t groups;                                            // ceil(W / 32)
  int64_t blocks;                                            // ceil(P / 16)
  int64_t pairs;                                             // ceil(P / 2)
  int64_t value_cols;                                        // C rounded up to 32
  size_t key_offset = 0, value_offset, scale_offset, bytes;  // sections of a page, 64-byte aligned

  int64_t value_groups() const { return (C + kLatentQ8Group - 1) / kLatentQ8Group; }
};

// H query rows [H, W] quantized per head and group like a cached row.
struct LatentQ8Query {
  int64_t H = 0;
  std::vector<int8_t> codes;  // [H, 4 quads]
  std::vector<float> scale;   // [H, groups]
  std::vector<int32_t> bias;  // [H, groups]: -128 * sum of the group's codes (the +128 of the stored keys)
};

namespace ops {

// A new page: every key code 0 (stored 128), values and scales 0.
void latent_q8_init_page(Device device, const LatentQ8Layout& l, uint8_t* page);
// Row r of a page: x [W] f32 quantized into all three sections (a non-finite value makes its group's scale NaN).
void latent_q8_store_row(Device device, const LatentQ8Layout& l, uint8_t* page, int64_t r, const float* x);
// Rows [r0, r0 + n) dequantized: out [n, W] at row stride ldo (s c for every column).
void latent_q8_load_rows(Device device, const LatentQ8Layout& l, const uint8_t* page, int64_t r0, int64_t n, float* out,
                         int64_t ldo);

// H query rows [H, W] (row stride ldq) quantized per head and group like a cached row.
void latent_q8_quantize_query(Device device, const LatentQ8Layout& l, const float* q, int64_t H, int64_t ldq,
                              LatentQ8Query& out);

// S [H, n] (row stride lds) = the scores of the page's first n tokens. `next` (optional): the page the caller reads
// after this one, prefetched whole (keys, values, scales) while this one is scored: a decode step streams every
// page from DRAM (the weights read between two steps evict them), and pages are separate allocations, whose
// boundaries the hardware prefetcher does not cross (one 32K-token MLA layer step with cold caches, small config:
// 0.98 -> 0.55 ms; with hot caches 0.37 -> 0.41).
void latent_q8_scores(Device device, const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q,
                      float* S, int64_t lds, const uint8_t* next = nullptr);
// o [H, C] (row stride ldo) += p [H, n] (row stride ldp, entries >= 0) times the page's first n value rows.
void latent_q8_values(Device device, const LatentQ8Layout& l, const uint8_t* page, int64_t n, const float* p,
                      int64_t ldp, int64_t H, float* o, int64_t ldo);

// True when the device's kernels use the VNNI int8 instructions (a capability query; false off the CPU).
bool latent_q8_native(Device device);

}  // namespace ops
}  // namespace myriad
