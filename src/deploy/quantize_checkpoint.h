// `myriad quantize`: a model directory (config.json, model.safetensors or shards with an index, tokenizer/) in,
// the same model with its linear weights block-quantized (quant/quant.h) out.
//
// What is quantized: every 2-D linear weight of the model (model_param_specs: a "....weight" of two dims) whose
// cols (inputs) are a multiple of 32, with only_experts restricting that to the routed experts
// (Component::kRoutedExperts). Kept as stored (f32, or whatever dtype the input has): the embeddings, every norm,
// the router (gate.weight and e_score_correction_bias: routing decisions stay exact), convs, A_log, dt_bias, the
// AttnRes queries, linear weights whose cols % 32 != 0 (counted apart in the report), and tensors the config does
// not know (copied unchanged). lm_head is quantized in "all" mode.
//
// Output, written atomically (a temporary directory beside out_dir, every file fsync'ed, then renamed into
// place; an existing non-empty out_dir is refused unless force, then swapped out):
//   model.safetensors  one file, streamed one tensor at a time (memory: one matrix), metadata of the input plus
//                      {"myriad.quant": type}. Order: 8-, 4- then 2-byte kept tensors, the quantized pairs in
//                      model order (W.qweight then W.qscale), then 1-byte kept tensors, so that every tensor is
//                      aligned to its element size and loads zero-copy.
//   config.json        the input's, with "quantization_config": {"quant_method": "myriad", "type": "q8",
//                      "group_size": 32, "only": "experts" | "all"} at the top level (a stale
//                      text_config.quantization_config, e.g. K3's compressed-tensors record, is removed: it no
//                      longer describes the weights).
//   tokenizer/         a copy of the input's, when it has one.
// Errors are myriad::Error naming the file or tensor: kIo (cannot read / write, out_dir exists), kValue (the input
// is already quantized, out_dir is the input), kFormat (a tensor's shape disagrees with the config, a weight to
// quantize is not F32/BF16/F16).
//
// Leaves out: sharded output, calibration-aware (GPTQ/AWQ-style) scales, mixed types in one checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace myriad {

struct QuantizeReport {
  QuantType type = QuantType::kQ8;
  bool only_experts = false;
  int64_t tensors_quantized = 0;
  int64_t tensors_kept = 0;      // every tensor stored as it was, including the two counts below
  int64_t kept_indivisible = 0;  // linear weights left unquantized because cols % 32 != 0
  int64_t kept_unknown = 0;      // tensors not in the config's parameter list
  std::vector<std::string> indivisible_names;
  int64_t weights_quantized = 0;        // elements of the quantized matrices
  uint64_t quantized_bytes_before = 0;  // their bytes in the input
  uint64_t quantized_bytes_after = 0;   // codes + scales
  uint64_t bytes_before = 0;            // tensor data bytes of the whole input checkpoint
  uint64_t bytes_after = 0;             // and of the output
  int64_t parameters = 0;               // elements of every tensor of the model
  std::string out_dir;
  std::vector<std::string> files;  // written, relative to out_dir

  // Bits per quantized weight, scales included (8.5 / 4.5 / 4.25), and per parameter of the whole output.
  double quantized_bits_per_weight() const;
  double bits_per_parameter() const;
};

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, QuantType type,
                                   bool only_experts, bool force);

}  // namespace myriad
