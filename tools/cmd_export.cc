// `myriad export gguf`: a model as one GGUF file for llama.cpp (src/deploy/gguf_export.h).
#include <cstdio>

#include "cli.h"
#include "core/error.h"
#include "deploy/gguf_export.h"

namespace {

int run_export(const myriad::cli::Args& args) {
  using namespace myriad;
  const char* usage = "usage: myriad export gguf --model DIR --out FILE.gguf [--type f32|q8_0|q4_0] [--name NAME]";
  MYRIAD_REQUIRE(args.positional().size() == 1 && args.positional()[0] == "gguf", kValue, usage);
  const std::string model = args.get_or("model", ""), out = args.get_or("out", "");
  MYRIAD_REQUIRE(!model.empty() && !out.empty(), kValue, "export gguf needs --model DIR and --out FILE.gguf; ", usage);
  GgufExportOptions o;
  const std::string type = args.get_choice("type", "f32", {"f32", "q8_0", "q4_0"});
  o.type = type == "q8_0" ? GgmlType::kQ8_0 : type == "q4_0" ? GgmlType::kQ4_0 : GgmlType::kF32;
  o.name = args.get_or("name", "");
  const GgufExportReport r = export_gguf(model, out, o);
  const std::string types = o.type == GgmlType::kF32
                                ? "all f32"
                                : std::to_string(r.quantized) + " " + type + ", " + std::to_string(r.kept_f32) + " f32";
  std::printf("wrote %s: GGUF %s, %lld tensors (%s), %lld metadata keys, %.2f MB (checkpoint %.2f MB)\n", out.c_str(),
              gguf_arch_name(r.arch), static_cast<long long>(r.tensors), types.c_str(),
              static_cast<long long>(r.metadata_keys), double(r.file_bytes) / 1e6, double(r.source_bytes) / 1e6);
  return 0;
}

}  // namespace

MYRIAD_COMMAND("export", "write a model as a GGUF file for llama.cpp (kimi-linear, kimi-k3 or deepseek2 layout)",
               "myriad export gguf --model DIR --out FILE.gguf [--type f32|q8_0|q4_0] [--name NAME]",
               {{"model", "DIR", "model directory (config.json, weights, tokenizer) or a run"},
                {"out", "FILE", "the .gguf file to write (atomically)"},
                {"type", "T", "f32 (default), q8_0 or q4_0: ggml's block types for the weight matrices"},
                {"name", "NAME", "general.name (default: the model directory's name)"}},
               run_export);
