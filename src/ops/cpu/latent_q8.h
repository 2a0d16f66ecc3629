// The CPU kernels of the latent q8 page (semantics and layout: ops/latent_q8.h). Included only inside src/ops.
#pragma once

#include <cstdint>

#include "ops/latent_q8.h"

namespace myriad::cpu {

void latent_q8_init_page(const LatentQ8Layout& l, uint8_t* page);
void latent_q8_store_row(const LatentQ8Layout& l, uint8_t* page, int64_t r, const float* x);
void latent_q8_load_rows(const LatentQ8Layout& l, const uint8_t* page, int64_t r0, int64_t n, float* out, int64_t ldo);
void latent_q8_quantize_query(const LatentQ8Layout& l, const float* q, int64_t H, int64_t ldq, LatentQ8Query& out);
void latent_q8_scores(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q, float* S,
                      int64_t lds, const uint8_t* next = nullptr);
void latent_q8_values(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const float* p, int64_t ldp, int64_t H,
                      float* o, int64_t ldo);
bool latent_q8_native();
// The portable loops whatever the build (tests compare the SIMD kernels with them: the same integer sums).
void latent_q8_scores_portable(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q,
                               float* S, int64_t lds);
void latent_q8_values_portable(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const float* p, int64_t ldp,
                               int64_t H, float* o, int64_t ldo);

}  // namespace myriad::cpu
