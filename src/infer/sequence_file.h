// A sequence's state in a file, so that a long prefill is paid once (as llama-server's slot save): every layer's
// KDA state and MLA latent cache after a run of tokens, in one safetensors file, written atomically, refused by any
// other model.
//
// Layout (safetensors; __metadata__ "format": "myriad-sequence-state", "version": "1"):
//   tokens                      I32 [n]            the token ids the state is of
//   layers.L.kda.conv_q|k|v     F32 [W - 1, H K]   KDA layer L: the short convolutions' last inputs
//   layers.L.kda.state          F32 [H, K, V]      ... and its delta-rule state
//   layers.L.mla.rows           F32|BF16 [n, C+Dr] MLA layer L with an f32 or bf16 cache: its rows [c_kv | k_pe]
//   layers.L.mla.q8_pages       U8 [pages, bytes]  ... with a q8 cache: its pages as stored (metadata page_tokens)
//   layers.L.mla.block_means    F32 [n / B, C+Dr]  ... with sparse MLA: the complete blocks' means, as the
//                                                  sequence computed them (before its rows were rounded)
// metadata: "model" (model_fingerprint), "tokens", "cache_dtype" (f32|bf16|q8), "page_tokens", "images" (the serving
// engine's key of the image rows among the tokens, decimal; 0 for text).
//
// Loading converts to the reader's page size and cache dtype where they differ (rows widened to f32 and stored
// anew; exact between f32 and bf16 of the same rows, a new rounding into q8). Every violation is one kFormat (a
// damaged or foreign file) or kValue (another model) naming the file and the rule.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "infer/inference_model.h"

namespace myriad {

// 16 hex digits identifying the model a state belongs to: xxh3-64 over the config summary and every stored tensor's
// name, dtype, shape and bytes (tensors over 64 KiB: 16 windows of 4 KiB spread over them, so that fingerprinting a
// large model stays cheap). The routed experts are left out: under expert parallelism each rank holds different
// ones, and no model differs in its experts alone (any training moves the router and attention too).
std::string model_fingerprint(const InferenceModel& model);

// One sequence's state per layer: kda[l] set on KDA layers, mla[l] holding the rows on MLA layers (an empty cache
// on the others), as SequenceState and the engine's prefix snapshots keep them.
struct SequenceSnapshot {
  std::vector<int32_t> tokens;
  uint64_t images = 0;
  std::vector<KdaState> kda;
  std::vector<MlaCache> mla;
};

// Writes the state after `tokens` (kda.size() == mla.size() == the model's layers, each cache holding
// tokens.size() rows). kValue when they do not fit the model; kIo when the file cannot be written.
// `fingerprint`: the model's model_fingerprint when the caller keeps it (a server saving many), empty: computed.
void save_sequence_file(const std::string& path, const InferenceModel& model, std::span<const int32_t> tokens,
                        uint64_t images, std::span<const KdaState> kda, std::span<const MlaCache> mla,
                        const std::string& fingerprint = {});

// Reads a state file written for `model`, its caches in pages of page_tokens rows stored as cache_dtype.
SequenceSnapshot load_sequence_file(const std::string& path, const InferenceModel& model, int64_t page_tokens,
                                    DType cache_dtype, const std::string& fingerprint = {});

}  // namespace myriad
