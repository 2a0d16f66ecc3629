// `myriad export gguf`: a model directory (or run) into one GGUF file that llama.cpp reads, in the layout its
// converter (convert_hf_to_gguf.py) writes for the architecture:
//   kimi-linear  KDA + MLA hybrids (Kimi-Linear): KDA layers as ssm_* tensors, MLA layers NoPE
//   deepseek2    all-MLA models with RoPE (DeepSeek-V2/V3)
// Names, shapes and metadata keys are llama.cpp's (gguf-py's constants). The conversions, as its converter does:
//   - routed experts stacked per layer: ffn_{gate,up,down}_exps [E, out, in] (w1 = gate, w3 = up, w2 = down);
//   - kv_b_proj [H (Dn + Dv), Ckv] split per head into attn_k_b [H, Ckv, Dn] (transposed) and attn_v_b [H, Dv, Ckv];
//   - KDA: A_log stored as ssm_a = -exp(A_log) [1, 1, H, 1]; dt_bias as ssm_dt.bias; the short convs [HK, 1, W] as
//     [1, HK, 1, W]; e_score_correction_bias as exp_probs_b.bias;
//   - deepseek2 only: the RoPE rows of q (per head) and of kv_a_proj_with_mqa's k_pe go from myriad's rotate-half
//     pairing (i, i + Dr/2) to the interleaved pairing (2i, 2i + 1) llama.cpp's deepseek2 rotates (HF DeepSeek
//     checkpoints are stored that way too, and a rope_interleave model already is: its rows are kept).
// Shapes above are PyTorch order; GGUF stores ggml's reversed order (ne[0] innermost).
//
// Types (--type): f32 keeps every tensor f32. q8_0 / q4_0 quantize every weight of two or more dims whose rows
// divide into blocks of 32 (ggml's Q8_0 / Q4_0, quant/ggml_blocks.h), except what llama.cpp keeps f32: the
// router (ffn_gate_inp), the short convs, ssm_a, norms and 1-D tensors. Rows that do not divide stay f32.
//
// What the formats cannot carry is refused up front (kUnsupported), every reason in one message: AttnRes, latent
// MoE (routed_expert_hidden_size), SiTU-GLU (hidden_act situ; llama.cpp runs SwiGLU), the MLA output gate, MoE
// layers not contiguous after the leading dense ones (moe_layer_freq != 1); for kimi-linear also the bounded KDA
// gate (gate_lower_bound: llama.cpp computes fla's unbounded softplus gate), the full-rank KDA output gate
// (g_proj: the format has only the low-rank ssm_g_a / ssm_g_b), RoPE on MLA, q_lora_rank (llama.cpp's kimi-linear
// loads q_proj only, as Kimi-Linear has it), softmax routing, unnormalized expert
// weights (llama.cpp's kimi-linear always renormalizes; a greedy router gets a zero exp_probs_b); for deepseek2 also
// NoPE MLA. A quantized myriad checkpoint (myriad quantize) is refused too: export from the plain one.
//
// The vocabulary: myriad's SentencePiece as llama.cpp's "llama" tokenizer (pieces, scores, token types: byte
// fallback tokens BYTE, the reserved specials CONTROL). Other tokenizer kinds are refused (kUnsupported).
// The file is written atomically, one tensor in memory at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "model/config.h"

namespace myriad {

enum class GgufArch { kKimiLinear, kDeepSeek2 };
const char* gguf_arch_name(GgufArch a);  // "kimi-linear", "deepseek2"

// The architecture a config exports as; throws kUnsupported listing every feature neither can carry.
GgufArch gguf_arch_for(const ModelConfig& c);

struct GgufExportOptions {
  GgmlType type = GgmlType::kF32;  // kF32, kQ8_0 or kQ4_0
  std::string name;                // general.name; empty: the model directory's name
};

struct GgufExportReport {
  GgufArch arch = GgufArch::kKimiLinear;
  int64_t tensors = 0;
  int64_t quantized = 0;  // tensors stored as the chosen block type
  int64_t kept_f32 = 0;   // the others
  int64_t metadata_keys = 0;
  uint64_t file_bytes = 0;
  uint64_t source_bytes = 0;  // the checkpoint's tensor data
};

GgufExportReport export_gguf(const std::string& model_dir, const std::string& out_path, const GgufExportOptions& o);

}  // namespace myriad
