// `myriad quantize --in DIR --out DIR --type q8|q4|mxfp4 [--only experts|all] [--force]`: block-quantize a
// model's linear weights (quant/quantize_checkpoint.h) and print what was done.
#include <cstdio>
#include <string>

#include "cli.h"
#include "core/error.h"
#include "deploy/quantize_checkpoint.h"

namespace {

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", double(b) / 1048576.0);
  return buf;
}

int run_quantize(const myriad::cli::Args& args) {
  const auto in = myriad::cli::model_flag(args);
  const auto out = args.get("out");
  const auto type = args.get("type");
  MYRIAD_REQUIRE(in && out && type, kValue,
                 "quantize needs --model DIR --out DIR --type q8|q4|mxfp4 (see myriad quantize --help)");
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "quantize takes no positional arguments, got '",
                 args.positional()[0], "'");
  const myriad::QuantType t = myriad::parse_quant_type(*type);
  const std::string only = args.get_or("only", "all");
  MYRIAD_REQUIRE(only == "experts" || only == "all", kValue, "--only ", only, ": expected experts or all");
  const myriad::QuantizeReport r = myriad::quantize_checkpoint(*in, *out, t, only == "experts", args.has("force"));

  std::printf("quantized %s to %s (%s): %lld tensors quantized, %lld kept", in->c_str(), myriad::quant_type_name(t),
              only == "experts" ? "routed experts only" : "all linear weights",
              static_cast<long long>(r.tensors_quantized), static_cast<long long>(r.tensors_kept));
  if (r.kept_indivisible || r.kept_unknown)
    std::printf(" (%lld linear weights with cols %% 32 != 0, %lld not in the config)",
                static_cast<long long>(r.kept_indivisible), static_cast<long long>(r.kept_unknown));
  std::printf("\n");
  std::printf("quantized weights: %lld, %s -> %s, %.2f bits per weight (scales included)\n",
              static_cast<long long>(r.weights_quantized), mib(r.quantized_bytes_before).c_str(),
              mib(r.quantized_bytes_after).c_str(), r.quantized_bits_per_weight());
  std::printf("model: %lld parameters, %s -> %s (%.1f%%), %.2f bits per parameter\n",
              static_cast<long long>(r.parameters), mib(r.bytes_before).c_str(), mib(r.bytes_after).c_str(),
              r.bytes_before ? 100.0 * double(r.bytes_after) / double(r.bytes_before) : 0.0, r.bits_per_parameter());
  std::string files;
  for (const auto& f : r.files) files += (files.empty() ? "" : ", ") + f;
  std::printf("wrote %s (%s)\n", r.out_dir.c_str(), files.c_str());
  return 0;
}

}  // namespace

MYRIAD_COMMAND("quantize", "block-quantize a model's linear weights (int8, int4 or MXFP4, groups of 32)",
               "myriad quantize --model DIR --out DIR --type q8|q4|mxfp4 [--only experts|all] [--force]",
               {{"model", "DIR",
                 "a model directory (config.json, model.safetensors or shards, tokenizer/) or a training run (its "
                 "latest checkpoint)"},
                {"in", "DIR", "the same as --model (its older spelling)"},
                {"out", "DIR", "output model directory (written atomically)"},
                {"type", "T", "q8 (8.5 bits/weight), q4 (4.5) or mxfp4 (4.25: E2M1 with a power-of-two scale)"},
                {"only", "WHAT", "experts: quantize only the routed experts; all (default): every linear weight"},
                {"force", "", "replace an existing output directory"}},
               run_quantize);
