// Expert pruning driven by routing statistics (`myriad prune`): run a model over calibration text, measure how
// much each routed expert of each MoE layer is used, keep the N most important experts of every MoE layer and
// write a smaller model that loads like any other.
//
// Importance (NOTE: the choice): the summed mixture weight. Over the calibration tokens t of a layer,
//   importance_e = sum over the copies (t, j) routed to e of p_tj,
// p_tj the weight the layer actually mixes expert e's output with (s over the chosen k, renormalised when
// moe_renormalize, times routed_scaling_factor; docs/design.md §1.5). Selection is recomputed from the layer's router
// scores s [T, E] (RoutingStats::scores) exactly as the MoE layer does it (top-k of s + e_score_correction_bias,
// or the capacity-limited routing at step 0 when the config has a capacity factor). An expert the router never
// picks has importance 0; one that is picked often but always with a small weight ranks below one picked less
// often with a large weight, since its output moves the residual stream less. Ties are broken by frequency
// (copies routed to the expert, RoutingStats::load), then by the lower expert id.
//
// The config has one num_experts for all layers, so every MoE layer keeps the same count N, each its own set.
// Kept experts are renumbered 0..N-1 in their original order; the router rows (gate.weight [E, D] -> [N, D]) and
// the correction bias ([E] -> [N]) are sliced to match; every other tensor is copied unchanged. config.json gets
// the new expert count (under whichever of num_experts / n_routed_experts the file uses, in text_config when the
// file is nested) and a top-level record "pruning": {"kept": N, "of": E, "calibration_tokens": T,
// "importance": "routing_weight"}. The tokenizer directory is copied; prune_report.json records, per layer, the
// kept ids with their frequency and weight share and the fraction of the calibration routing weight retained.
//
// NOTE (exactness): with a sigmoid router the score of an expert depends only on its own router row, so for a
// token that never chose a dropped expert the pruned layer picks the same k experts with the same weights and the
// output is unchanged (bit for bit, when the kernels are: tests/deploy/prune_test.cc checks it). With a softmax
// router the scores are renormalised over fewer experts: with moe_renormalize the mixture weights are equal in
// exact arithmetic (the common denominator cancels), without it they grow.
//
// Output is atomic: everything is written into a temporary directory beside the output (each file fsync'ed),
// which is then renamed into place; an existing output is refused unless force (then swapped out atomically).
//
// Data (calibration and evaluation): a text file (one document), a JSONL file ("text" per line), a directory of
// them (data/tokenize/data_files.h, collect_data_files), or a token-shard directory of `myriad data prepare` / a run's
// data/ (calibration reads its train split, evaluation its val split). Documents are tokenized with the model's
// tokenizer and joined with <|endoftext|>.
//
// Leaves out: per-layer expert counts (the config format has one), merging dropped experts into kept ones,
// re-balancing the correction bias after pruning, MTP layers.
// Shape legend: T tokens, D hidden, E experts before, N experts kept, k top-k.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenize/tokenizer.h"
#include "model/transformer.h"

namespace myriad {

// --keep: a count ("4") or a percentage of num_experts ("50%", rounded up).
struct KeepSpec {
  int64_t count = 0;
  double percent = 0.0;
  bool is_percent = false;
};
// Throws kValue naming the text and the rule: a count must be an integer >= 1, a percentage lie in (0, 100].
KeepSpec parse_keep_spec(const std::string& text);
// The number of experts kept per layer: k <= N <= E, else kValue naming both numbers.
int64_t resolve_keep(const KeepSpec& spec, int64_t num_experts, int64_t top_k);

// Routing statistics of one MoE layer over the calibration tokens.
struct LayerImportance {
  int64_t layer = -1;              // 0-based layer index
  std::vector<int64_t> frequency;  // [E] copies routed to each expert
  std::vector<double> weight;      // [E] summed mixture weight (the importance)
};

struct RoutingImportance {
  int64_t tokens = 0;   // calibration tokens run
  int64_t windows = 0;  // forward passes
  int64_t top_k = 0;
  std::vector<LayerImportance> layers;  // the MoE layers, in order
};

// The window used for calibration and evaluation when none is given: min(max_position_embeddings, 1024).
int64_t default_window(const ModelConfig& config);

// Runs `model` (no gradients) over `tokens` in consecutive windows of at most `window` tokens and sums each MoE
// layer's routing frequency and mixture weight per expert.
RoutingImportance collect_routing_importance(const Transformer& model, const std::vector<int32_t>& tokens,
                                             int64_t window);

// The `keep` most important experts of a layer (weight, then frequency, then lower id), in ascending id order.
std::vector<int64_t> select_experts(const LayerImportance& layer, int64_t keep);

// Tokens of `path` (see "Data" above), at most max_tokens of them (max_tokens <= 0: all). `split` names the
// split of a token-shard directory ("train" for calibration, "val" for evaluation). Throws kIo for a missing
// path, kValue when there are no tokens.
std::vector<int32_t> read_data_tokens(const std::string& path, const std::string& split, const Tokenizer& tokenizer,
                                      int64_t max_tokens);

struct Perplexity {
  int64_t tokens = 0;  // predicted tokens
  double loss = 0.0;   // mean cross-entropy in nats
  double perplexity = 0.0;
};
// Mean next-token loss of `model` over `tokens`: windows of window + 1 tokens sharing one token, so every token
// but the first is a target once.
Perplexity evaluate_perplexity(const Transformer& model, const std::vector<int32_t>& tokens, int64_t window);

// A model directory as `myriad prune` / `generate` read it: DIR itself when it holds model.safetensors (or the
// index), else the latest checkpoint of a run; the tokenizer from the checkpoint's tokenizer/, else DIR's.
struct ModelLocation {
  std::string checkpoint_dir;
  std::string tokenizer_dir;
};
// Throws kIo naming DIR when there is no model or no tokenizer; `needs_tokenizer_for` says why in that message
// ("needed to tokenize the calibration data", "a GGUF file carries the tokenizer").
ModelLocation locate_model(const std::string& dir, const std::string& needs_tokenizer_for);

struct PruneOptions {
  std::string in_dir;      // model directory or run directory
  std::string calib_path;  // calibration data
  KeepSpec keep;
  std::string out_dir;
  int64_t max_tokens = 32768;  // calibration tokens at most (and evaluation targets at most)
  int64_t window = 0;          // 0: default_window(config)
  bool force = false;          // replace an existing output
  std::string eval_path;       // when set: perplexity of the original and the pruned model on it
};

struct PruneLayerResult {
  int64_t layer = -1;
  std::vector<int64_t> kept;     // original ids, ascending; new id i = kept[i]
  double retained_weight = 0.0;  // kept experts' share of the layer's calibration routing weight
  double retained_copies = 0.0;  // kept experts' share of its routed copies
};

struct PruneResult {
  std::string checkpoint_dir;  // what was read
  std::string out_dir;
  int64_t kept = 0, of = 0, top_k = 0;
  int64_t calibration_tokens = 0;
  std::vector<PruneLayerResult> layers;
  double retained_weight = 0.0;                // over all MoE layers
  uint64_t bytes_before = 0, bytes_after = 0;  // weight files on disk
  std::optional<Perplexity> eval_before, eval_after;
  nlohmann::ordered_json report;  // what prune_report.json holds
};

// The whole of `myriad prune`. Errors (myriad::Error): kIo for a missing model, tokenizer or data and for an
// existing output without force; kValue for empty calibration data and a keep count outside [k, E];
// kUnsupported for a model without MoE layers.
PruneResult prune_model(const PruneOptions& options);

}  // namespace myriad
