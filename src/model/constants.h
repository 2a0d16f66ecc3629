// The fixed numbers of the model's mathematics, named once for training, prefill, decode and pruning.
#pragma once

namespace myriad {

// KDA (docs/design.md §1.2): q and k are L2-normalised per head, ||x||_2 clamped from below by this (fla's and Kimi
// Linear's l2norm eps).
inline constexpr float kKdaQkL2NormEps = 1e-6f;

// Gated MLA (docs/design.md §1.3 NOTE): the RMSNorm of the compressed query and key-value latents (q_a_layernorm,
// kv_a_layernorm) uses 1e-6 as DeepSeek's and Kimi's modeling code do, not the config's rms_norm_eps.
inline constexpr float kMlaLatentNormEps = 1e-6f;

}  // namespace myriad
