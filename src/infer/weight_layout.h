// Checkpoints myriad did not write, read under myriad's tensor names (docs/tensors.md) without copying: each
// tensor of the model is a view (a rename, a reshape, a slice, the same bytes read as U8) of what the folder holds.
//
// Layouts recognised, per tensor of model_param_specs(config), trying in turn:
//   myriad       the name itself (myriad's checkpoints, and Moonshot's Kimi-Linear release, whose remote modeling
//                code myriad's names follow)
//   K3           the same under "language_model." (K3's text tower; its vision_tower.* / mm_projector.* are not
//                part of the text model and are left out)
//   DeepSeek-V3  block_sparse_moe.* as mlp.*, routed experts' w1 / w3 / w2 as gate_proj / up_proj / down_proj
//   transformers 5's kimi_linear (its own modeling code, not the remote one): f_a/f_b/b/g_a/g_b_proj as
//                forget_gate_down / forget_gate_up / beta_proj / output_gate_down / output_gate_up, mlp.*, and two
//                fused forms sliced: conv1d [2 HK + HV, 1, W] (q | k | v) and mlp.experts.gate_up_proj [E, 2F, L]
//                (gate rows, then up rows) / mlp.experts.down_proj [E, L, F]
// and per tensor the shapes those releases store:
//   A_log        [H] as myriad, [1, 1, H, 1] (Kimi-Linear's remote code), [H, 1] (transformers), or a flat
//                [N >= H] whose first H are the heads (K3 pads it to the head dim); dt_bias [HK] or [H, K]
//   short convs  [HK, 1, W] as myriad, or [HK, W]
//   a quantized linear weight W: myriad's W.qweight + W.qscale (myriad quantize), or compressed-tensors' MXFP4
//                (K3's routed experts, as shipped): W_stem.weight_packed (U8 or I8 [out, in/2], two E2M1 codes a
//                byte, the even column in the low nibble) + W_stem.weight_scale (U8 or F8_E8M0 [out, in/32]), the
//                same bits as myriad's mxfp4 pair, read as stored
// Dtypes are as stored (F32, BF16, F16): the serving path reads them as they are, training widens to f32.
//
// A checkpoint that already holds every tensor under myriad's names and shapes is returned as opened (its own
// errors and extra tensors reported as before). Otherwise the adapted checkpoint presents exactly the model's
// tensors; one the folder has in none of these forms is left out, so validation then names it as missing.
#pragma once

#include <string>

#include "io/checkpoint.h"
#include "model/config.h"

namespace myriad {

// The layout adapter over an open checkpoint (see above). Throws kFormat for a tensor found in a recognised
// form whose shape or dtype cannot be the config's.
Checkpoint adapt_checkpoint(const Checkpoint& ck, const ModelConfig& c);

// Checkpoint::open(dir) then adapt_checkpoint: what every model loader uses.
Checkpoint open_model_checkpoint(const std::string& dir, const ModelConfig& c);

}  // namespace myriad
