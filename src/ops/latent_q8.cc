// The latent q8 page: its layout, and the dispatch of its ops (ops/latent_q8.h).
#include "ops/latent_q8.h"

#include "core/error.h"
#include "ops/cpu/latent_q8.h"
#include "ops/kernels.h"

namespace myriad {

namespace {

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

}  // namespace

LatentQ8Layout::LatentQ8Layout(int64_t kv_lora_rank, int64_t rope_dim, int64_t page_tokens)
    : C(kv_lora_rank), W(kv_lora_rank + rope_dim), P(page_tokens) {
  MYRIAD_REQUIRE(kv_lora_rank > 0 && rope_dim >= 0 && page_tokens > 0, kValue, "latent q8 page: kv_lora_rank ",
                 kv_lora_rank, ", rope dim ", rope_dim, ", page tokens ", page_tokens, " (need > 0, >= 0, > 0)");
  quads = (W + 3) / 4;
  groups = (W + kLatentQ8Group - 1) / kLatentQ8Group;
  blocks = (P + kLatentQ8Block - 1) / kLatentQ8Block;
  pairs = (P + 1) / 2;
  value_cols = (C + kLatentQ8Group - 1) / kLatentQ8Group * kLatentQ8Group;
  value_offset = align64(size_t(blocks * quads * 64));
  scale_offset = value_offset + align64(size_t(pairs * value_cols * 2));
  bytes = scale_offset + align64(size_t(groups * blocks * kLatentQ8Block) * sizeof(float));
}

namespace ops {

void latent_q8_init_page(Device device, const LatentQ8Layout& l, uint8_t* page) {
  if (device == Device::kCPU) return cpu::latent_q8_init_page(l, page);
  missing_kernel("latent_q8_init_page", device);
}
void latent_q8_store_row(Device device, const LatentQ8Layout& l, uint8_t* page, int64_t r, const float* x) {
  if (device == Device::kCPU) return cpu::latent_q8_store_row(l, page, r, x);
  missing_kernel("latent_q8_store_row", device);
}
void latent_q8_load_rows(Device device, const LatentQ8Layout& l, const uint8_t* page, int64_t r0, int64_t n, float* out,
                         int64_t ldo) {
  if (device == Device::kCPU) return cpu::latent_q8_load_rows(l, page, r0, n, out, ldo);
  missing_kernel("latent_q8_load_rows", device);
}
void latent_q8_quantize_query(Device device, const LatentQ8Layout& l, const float* q, int64_t H, int64_t ldq,
                              LatentQ8Query& out) {
  if (device == Device::kCPU) return cpu::latent_q8_quantize_query(l, q, H, ldq, out);
  missing_kernel("latent_q8_quantize_query", device);
}
void latent_q8_scores(Device device, const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q,
                      float* S, int64_t lds, const uint8_t* next) {
  if (device == Device::kCPU) return cpu::latent_q8_scores(l, page, n, q, S, lds, next);
  missing_kernel("latent_q8_scores", device);
}
void latent_q8_values(Device device, const LatentQ8Layout& l, const uint8_t* page, int64_t n, const float* p,
                      int64_t ldp, int64_t H, float* o, int64_t ldo) {
  if (device == Device::kCPU) return cpu::latent_q8_values(l, page, n, p, ldp, H, o, ldo);
  missing_kernel("latent_q8_values", device);
}
bool latent_q8_native(Device device) {
  return device == Device::kCPU && cpu::latent_q8_native();
}

}  // namespace ops
}  // namespace myriad
