// `myriad export gguf`: a model directory (or run) into one GGUF file that llama.cpp reads, in the layout its
// converter (convert_hf_to_gguf.py) writes for the architecture:
//   kimi-linear  KDA + MLA hybrids (Kimi-Linear): KDA layers as ssm_* tensors, MLA layers NoPE
//   kimi-k3      KDA + MLA hybrids with K3's features (llama.cpp's src/models/kimi-k3.cpp): block AttnRes, latent
//                MoE, SiTU-GLU, the MLA output gate, the full-rank KDA output gate, the bounded KDA gate
//   deepseek2    all-MLA models with RoPE (DeepSeek-V2/V3)
// A KDA model is written as kimi-linear when that format carries all of it (more llama.cpp builds read it), else
// as kimi-k3.
// Names, shapes and metadata keys are llama.cpp's (gguf-py's constants). The conversions, as its converter does:
//   - routed experts stacked per layer: ffn_{gate,up,down}_exps [E, out, in] (w1 = gate, w3 = up, w2 = down);
//   - kv_b_proj [H (Dn + Dv), Ckv] split per head into attn_k_b [H, Ckv, Dn] (transposed) and attn_v_b [H, Dv, Ckv];
//   - KDA: A_log stored as ssm_a = -exp(A_log) ([1, 1, H, 1] for kimi-linear, [H] for kimi-k3); dt_bias as
//     ssm_dt.bias; the short convs [HK, 1, W] as [1, HK, 1, W]; e_score_correction_bias as exp_probs_b.bias;
//   - kimi-k3: each AttnRes query (res_norm [D] and res_proj [1, D]) as one score vector, their product:
//     blk.N.attn_res_score, blk.N.ffn_res_score, output_res_score; the latent MoE's projections and norm as
//     ffn_routed_{down,up,norm}; g_proj as ssm_g (KDA) or attn_gate (MLA); SiTU's betas, the gate's lower bound
//     (absent: softplus), attn_res.block_size and expert_latent_length as keys; a null situ_linear_beta as 0
//     (llama.cpp leaves the up branch unclamped for <= 0); output.weight written even for tied embeddings;
//   - deepseek2 only: the RoPE rows of q (per head) and of kv_a_proj_with_mqa's k_pe go from myriad's rotate-half
//     pairing (i, i + Dr/2) to the interleaved pairing (2i, 2i + 1) llama.cpp's deepseek2 rotates (HF DeepSeek
//     checkpoints are stored that way too, and a rope_interleave model already is: its rows are kept).
// Shapes above are PyTorch order; GGUF stores ggml's reversed order (ne[0] innermost).
//
// Types (--type): f32 keeps every tensor f32. q8_0 / q4_0 quantize every weight of two or more dims whose rows
// divide into blocks of 32 (ggml's Q8_0 / Q4_0, quant/ggml_blocks.h), except what llama.cpp keeps f32: the
// router (ffn_gate_inp), the short convs, ssm_a, norms and 1-D tensors. Rows that do not divide stay f32.
//
// What the formats cannot carry is refused up front (kUnsupported), every reason in one message. All: MoE layers
// not contiguous after the leading dense ones (moe_layer_freq != 1), block-sparse MLA, log-n query scaling. kimi-*:
// RoPE on MLA, softmax routing, KDA heads other than the MLA heads (llama.cpp reads one head count). kimi-k3:
// attn_res_mode skip, SwiGLU (it runs SiTU everywhere), the low-rank KDA output gate, no MoE layers. kimi-linear (when
// kimi-k3 cannot carry the model either, both lists are named): AttnRes, latent MoE, SiTU-GLU, the MLA output gate, the
// bounded KDA gate, the full-rank KDA output gate, q_lora_rank (llama.cpp's kimi-linear loads q_proj only),
// unnormalized expert weights (it always renormalizes; a greedy router gets a zero exp_probs_b, as for kimi-k3).
// deepseek2: AttnRes, latent MoE, SiTU-GLU, the MLA output gate, NoPE MLA. A quantized myriad checkpoint (myriad
// quantize) is refused too: export from the plain one. llama.cpp normalizes the MLA latents (q_a / kv_a layernorm) with
// rms_norm_eps where the modeling code uses 1e-6: a model whose rms_norm_eps is not 1e-6 runs slightly differently
// there (measured ~7e-4 of the logits' scale at 1e-5).
//
// The vocabulary: myriad's SentencePiece as llama.cpp's "llama" tokenizer (pieces, scores, token types: byte
// fallback tokens BYTE, the reserved specials CONTROL). The byte-level BPEs as its "gpt2" tokenizer: tokens as
// ByteLevel strings, merges (a tiktoken vocabulary's derived from its ranks, as llama.cpp's converter derives
// them), added tokens CONTROL / USER_DEFINED, ids without a token "[PAD<id>]" UNUSED up to vocab_size, and the
// pre-tokenizer by llama.cpp's name: kimi-k2 (tiktoken), llama-bpe, deepseek-v3 or qwen2 (tokenizer.json steps
// equal to those models'; anything else is refused naming the steps). llama.cpp applies no normalizer: a Qwen 2
// tokenizer's NFC step is not carried (text already in NFC tokenizes the same).
// The file is written atomically, one tensor in memory at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "model/config.h"

namespace myriad {

enum class GgufArch { kKimiLinear, kKimiK3, kDeepSeek2 };
const char* gguf_arch_name(GgufArch a);  // "kimi-linear", "kimi-k3", "deepseek2"

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
