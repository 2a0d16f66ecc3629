// `myriad prune --in DIR --calib DATA --keep N|P% --out DIR [--max-tokens M] [--eval DATA] [--force]`: keep the N
// most used routed experts of every MoE layer, measured on calibration text (model/prune.h). Argument parsing only.
#include <cstdio>
#include <string>

#include "cli.h"
#include "core/error.h"
#include "deploy/prune.h"

namespace {

int run_prune(const myriad::cli::Args& args) {
  myriad::PruneOptions o;
  o.in_dir = myriad::cli::model_flag(args).value_or("");
  o.calib_path = args.get_or("calib", "");
  o.out_dir = args.get_or("out", "");
  const auto keep = args.get("keep");
  MYRIAD_REQUIRE(!o.in_dir.empty() && !o.calib_path.empty() && !o.out_dir.empty() && keep.has_value(), kValue,
                 "prune needs --model DIR --calib DATA --keep N|P% --out DIR");
  o.keep = myriad::parse_keep_spec(*keep);
  o.max_tokens = args.get_int("max-tokens", 32768, 1, 1L << 40);
  o.eval_path = args.get_or("eval", "");
  o.force = args.has("force");
  const myriad::PruneResult r = myriad::prune_model(o);

  std::printf("pruned %s: kept %lld of %lld experts per MoE layer (top-%lld), %lld calibration tokens\n",
              r.checkpoint_dir.c_str(), static_cast<long long>(r.kept), static_cast<long long>(r.of),
              static_cast<long long>(r.top_k), static_cast<long long>(r.calibration_tokens));
  for (const auto& l : r.layers) {
    std::string ids;
    for (int64_t e : l.kept) ids += (ids.empty() ? "" : ",") + std::to_string(e);
    std::printf("  layer %-3lld kept [%s]  routing weight retained %.1f%%, copies retained %.1f%%\n",
                static_cast<long long>(l.layer), ids.c_str(), 100.0 * l.retained_weight, 100.0 * l.retained_copies);
  }
  std::printf("routing weight retained over all MoE layers: %.1f%%\n", 100.0 * r.retained_weight);
  std::printf("weights: %.2f MiB -> %.2f MiB (%.1f%%)\n", double(r.bytes_before) / 1048576.0,
              double(r.bytes_after) / 1048576.0,
              r.bytes_before ? 100.0 * double(r.bytes_after) / double(r.bytes_before) : 0.0);
  if (r.eval_before && r.eval_after) {
    std::printf("eval on %s (%lld tokens): perplexity %.4f -> %.4f (loss %.4f -> %.4f nats)\n", o.eval_path.c_str(),
                static_cast<long long>(r.eval_before->tokens), r.eval_before->perplexity, r.eval_after->perplexity,
                r.eval_before->loss, r.eval_after->loss);
  }
  std::printf("wrote %s (config.json, model.safetensors, tokenizer/, prune_report.json)\n", r.out_dir.c_str());
  return 0;
}

}  // namespace

MYRIAD_COMMAND("prune", "drop the least used routed experts, measured on calibration text",
               "myriad prune --model DIR --calib DATA --keep N|P% --out DIR [--max-tokens M] [--eval DATA] [--force]",
               {{"model", "DIR", "a model directory (config.json, model.safetensors, tokenizer/) or a training run"},
                {"in", "DIR", "the same as --model (its older spelling)"},
                {"calib", "DATA",
                 "calibration data: text / JSONL files or a directory of them, or a token-shard directory "
                 "(its train split)"},
                {"keep", "N|P%", "experts kept per MoE layer: a count, or a percentage of num_experts (rounded up)"},
                {"out", "DIR", "output model directory (written atomically)"},
                {"max-tokens", "M", "calibration tokens at most, and evaluation tokens at most (default 32768)"},
                {"eval", "DATA",
                 "also report the perplexity of the original and the pruned model on DATA (a shard directory: "
                 "its val split)"},
                {"force", "", "replace an existing output directory"}},
               run_prune);
