// `myriad convert --to LAYOUT`: a myriad model written in another project's checkpoint layout, the inverse of what
// infer/weight_layout.h reads, so a model trained here loads there:
//   transformers  transformers 5's own kimi_linear (KimiLinearForCausalLM): config.json as KimiLinearConfig
//                 (layer_types, mlp_layer_types, linear_num_key_heads, linear_key_head_dim, linear_conv_kernel_dim,
//                 n_routed_experts, num_experts_per_tok, n_shared_experts, norm_topk_prob, ...); tensors renamed
//                 (forget_gate_down/up, beta_proj, output_gate_down/up, mlp.*), the three short convs fused into
//                 conv1d [3 HK, 1, W], the routed experts into mlp.experts.gate_up_proj [E, 2F, D] (gate rows, then
//                 up rows) and down_proj [E, D, F], A_log [H, 1], dt_bias [H, K]
//   deepseek-v3   DeepseekV3ForCausalLM: config.json with DeepSeek's names (model_type deepseek_v3); mlp.* names,
//                 experts gate_proj / up_proj / down_proj; the RoPE rows of q and k_pe re-paired to the interleaved
//                 order its checkpoints use (kept when the model already is rope_interleave)
// dtype: the tensors' dtype in the output (kF32 keeps them; kBF16 / kF16 round to nearest even), except A_log,
// dt_bias and e_score_correction_bias, which stay f32 as published checkpoints keep them.
// Only what the target's modeling code computes is accepted; anything else is refused up front with every reason
// (kUnsupported): transformers' kimi_linear has the softplus KDA gate, the low-rank output gate, NoPE MLA without
// an output gate, SwiGLU, sigmoid noaux_tc routing, no AttnRes and no latent MoE; DeepSeek-V3 the same MoE and MLP
// with RoPE MLA and no KDA layers.
// Output directory: config.json, model.safetensors (streamed, one tensor in memory at a time), tokenizer/ (the
// model's tokenizer as myriad saves it), written atomically (a staged directory renamed into place); an existing
// non-empty out_dir is refused unless force.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace myriad {

enum class CheckpointLayoutTarget { kTransformersKimiLinear, kDeepSeekV3 };
CheckpointLayoutTarget parse_layout_target(const std::string& name);  // "transformers" | "deepseek-v3"; kValue

struct LayoutConvertReport {
  int64_t tensors = 0;
  uint64_t bytes = 0;
};

LayoutConvertReport convert_model_layout(const std::string& model_dir, const std::string& out_dir,
                                         CheckpointLayoutTarget target, DType dtype, bool force);

}  // namespace myriad
