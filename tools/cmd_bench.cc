// `myriad bench ops [--seconds S] [--json FILE]`: the CPU kernels at training-sized shapes beside the
// machine's own ceilings (f32 FMA peak, STREAM triad and read) measured in the same run.
// `myriad bench model --config F [--seq T] [--seconds S] [--json FILE]`: the whole model (forward, forward +
// backward), KDA chunkwise vs recurrent training, MoE scaling from 8 to 896 experts, and where the time goes,
// beside the FMA peak of the same run (src/bench/model_bench.h).
// `mpirun -np N myriad bench dist`: the expert-parallel all-to-all against MPI_Alltoallv (src/bench/dist_bench.h).
// Benchmarks, not tests: figures below target print "below" and the exit status stays 0. The measuring code
// lives in src/bench/.
#include <cstdio>
#include <string>

#include "bench/dist_bench.h"
#include "bench/longctx_bench.h"
#include "bench/model_bench.h"
#include "bench/op_bench.h"
#include "bench/report.h"
#include "bench/serve_bench.h"
#include "bench/spec_bench.h"
#include "bench/vision_bench.h"
#include "cli.h"
#include "core/error.h"
#include "core/threads.h"
#include "dist/mpi_communicator.h"
#include "model/config.h"
#include "ops/machine_limits.h"
#include "quant/quant.h"
#include "train/longctx_eval.h"

namespace {

// --json FILE: {"bench": name, "limits": the machine's ceilings (when measured), then the figures' keys}, written
// atomically (FILE.tmp, then renamed).
void write_bench_json(const myriad::cli::Args& args, const char* name, const myriad::MachineLimits* limits,
                      const nlohmann::ordered_json& figures) {
  const auto path = args.get("json");
  if (!path) return;
  nlohmann::ordered_json j;
  j["bench"] = name;
  if (limits) j["limits"] = myriad::bench::limits_json(*limits);
  for (const auto& [key, value] : figures.items()) j[key] = value;
  myriad::bench::write_text_file(*path, j.dump(2) + "\n");
  std::printf("wrote %s\n", path->c_str());
}

int run_ops(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  MYRIAD_REQUIRE(!args.has("config") && !args.has("seq"), kValue, "bench ops: --config and --seq are for bench model");
  const long seconds = args.get_int("seconds", 20, 1, 3600);

  std::printf("myriad bench ops: %d threads, ~%ld s of timed repeats (best of repeats after one warm-up call)\n",
              myriad::num_threads(), seconds);
  // The ceilings take a fifth of the budget; the op rows share the rest.
  const MachineLimits limits = measure_machine_limits(0.2 * double(seconds));
  print_ceilings(stdout, limits);
  const nlohmann::ordered_json gemm = run_gemm_backends(limits, 0.2 * double(seconds), stdout);
  const nlohmann::ordered_json quant = run_quant_products(limits, 0.1 * double(seconds), stdout);
  std::printf(
      "\nconventions:\n"
      "  time/call: best of repeats after one warm-up call; figure = work per call / time per call\n"
      "  attention: causal FLOPs, forward = 2 matmuls x 2*(T*T/2)*D per head, backward = 5 matmuls' worth = 2.5x "
      "forward\n"
      "  memory-bound ops: bytes necessarily moved (inputs read once, outputs written once, accumulated gradients "
      "read and written; per-op counts in src/bench/op_bench.cc);\n"
      "    ceiling = the triad timed in the same row, one pass after each op call (the bandwidth on offer drifts)\n\n");
  print_table_header(stdout);
  const auto rows = run_op_bench(limits, 0.5 * double(seconds), [](const BenchRow& r) { print_table_row(stdout, r); });

  int below = 0, targeted = 0;
  for (const auto& r : rows) {
    targeted += r.has_target();
    below += !r.pass();
  }
  std::printf(
      "\n%d of %d targeted rows meet their target (attention fwd+bwd >= %.0f%% of the FMA peak, memory-bound >= "
      "%.0f%% of triad)\n",
      targeted - below, targeted, 100 * kAttentionTarget, 100 * kMemoryBoundTarget);
  write_bench_json(
      args, "ops", &limits,
      {{"seconds_budget", seconds}, {"gemm_backends", gemm}, {"quant_products", quant}, {"rows", rows_json(rows)}});
  return 0;
}

int run_model(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  const auto config = args.get("config");
  MYRIAD_REQUIRE(config.has_value(), kValue, "bench model needs --config FILE (see myriad bench --help)");
  ModelBenchOptions opt;
  opt.config_path = *config;
  opt.seq = args.get_int("seq", 0, 1, 1 << 20);
  const long seconds = args.get_int("seconds", 40, 1, 3600);
  opt.budget_s = double(seconds);
  {  // config and --seq errors before the ceilings are measured
    const myriad::ModelConfig c = myriad::load_model_config(opt.config_path, nullptr);
    MYRIAD_REQUIRE(opt.seq <= c.max_position_embeddings, kValue, "bench model: --seq ", opt.seq,
                   " exceeds max_position_embeddings (", c.max_position_embeddings, ") of ", opt.config_path);
  }

  std::printf(
      "myriad bench model: %d threads, ~%ld s of timed repeats plus setup (best of repeats after one warm-up "
      "call)\n",
      myriad::num_threads(), seconds);
  // A short ceiling: the FMA peak is measured again at the end of the run to show the drift.
  const MachineLimits limits = measure_machine_limits(3.0);
  print_ceilings(stdout, limits);
  const ModelBenchResult res = run_model_bench(opt, limits, stdout);
  std::printf(
      "\n%d of %d targets met (model forward+backward >= %.0f%% of the FMA peak, KDA training in the faster form "
      "(>= %.0f%% of its speed), MoE %lld/%lld experts time <= %.1fx)\n",
      res.passed, res.targeted, 100 * kModelTarget, 100 * kKdaFormSlack, (long long)kMoeExpertsLarge,
      (long long)kMoeExpertsSmall, kMoeScalingTarget);
  nlohmann::ordered_json figures = {{"seconds_budget", seconds}};
  for (const auto& [key, value] : res.json.items()) figures[key] = value;
  figures["targets_met"] = res.passed;
  figures["targets"] = res.targeted;
  write_bench_json(args, "model", &limits, figures);
  return 0;
}

int run_serve(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  ServeBenchOptions opt;
  opt.model_dir = args.get_or("model", "");
  opt.config_path = args.get_or("config", "");
  MYRIAD_REQUIRE(opt.model_dir.empty() != opt.config_path.empty(), kValue,
                 "bench serve needs --model DIR or --config FILE (random weights), not both");
  opt.seconds = double(args.get_int("seconds", 40, 1, 3600));
  if (const auto f = args.get("formats")) {
    opt.formats.clear();
    for (size_t a = 0; a <= f->size();) {
      const size_t b = std::min(f->find(',', a), f->size());
      const std::string name = f->substr(a, b - a);
      if (name != "f32") (void)myriad::parse_quant_type(name);  // an unknown name is an error here
      opt.formats.push_back(name);
      a = b + 1;
    }
  }
  if (!opt.config_path.empty()) (void)myriad::load_model_config(opt.config_path, nullptr);  // errors first
  std::printf("myriad bench serve: %d threads, ~%.0f s of timed repeats plus setup (best of repeats)\n",
              myriad::num_threads(), opt.seconds);
  const MachineLimits limits = measure_machine_limits(3.0);
  print_ceilings(stdout, limits);
  const ServeBenchResult res = run_serve_bench(opt, limits, stdout);
  std::printf("\n%d of %d targets met\n", res.targets_met, res.targets);
  if (args.has("json")) {
    nlohmann::ordered_json j;
    for (const ServeBenchRow& r : res.rows)
      j["formats"][r.format] = {
          {"prefill_tokens_s", r.prefill_tokens_s},      {"prefill_gflops", r.prefill_gflops},
          {"decode_tokens_s_b1", r.decode_tokens_s[0]},  {"decode_tokens_s_b4", r.decode_tokens_s[1]},
          {"decode_tokens_s_b16", r.decode_tokens_s[2]}, {"b1_bytes_per_token", r.bytes_per_token},
          {"b1_bandwidth_gbs", r.bandwidth_gbs},         {"triad_gbs", r.triad_gbs}};
    for (const ServeBenchRow& r : res.rows) {
      j["formats"][r.format]["b1_step_ms"] = 1e3 * r.decode_step_s;
      for (const auto& [phase, s] : r.decode_phases) j["formats"][r.format]["b1_phase_ms"][phase] = 1e3 * s;
    }
    for (const auto& r : res.context) {
      const std::string cache = r.cache == myriad::DType::kF32    ? "f32"
                                : r.cache == myriad::DType::kBF16 ? "bf16"
                                                                  : "q8";
      j["decode_1k_" + cache + "_cache_ms"] = r.ms_1k;
      j["decode_long_" + cache + "_cache_ms"] = r.ms_long;
    }
    j["ttft_cold_ms"] = res.ttft_cold_ms;
    j["ttft_warm_ms"] = res.ttft_warm_ms;
    j["targets_met"] = res.targets_met;
    j["targets"] = res.targets;
    write_bench_json(args, "serve", &limits, j);
  }
  return 0;
}

int run_spec(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  SpecBenchOptions opt;
  opt.model_dir = args.get_or("model", "");
  MYRIAD_REQUIRE(!opt.model_dir.empty(), kValue, "bench spec needs --model DIR (a trained model or run)");
  opt.draft_model_dir = args.get_or("draft-model", "");
  opt.spec_tokens = args.get_int("spec-tokens", opt.spec_tokens, 1, 64);
  opt.tokens = args.get_int("tokens", opt.tokens, 2, 1 << 20);
  opt.rounds = args.get_int("rounds", opt.rounds, 1, 100);
  opt.doc_tokens = args.get_int("doc-tokens", opt.doc_tokens, 64, 1 << 20);
  std::printf("myriad bench spec: %d threads, %lld rounds of plain and speculative runs interleaved (best of each)\n",
              myriad::num_threads(), (long long)opt.rounds);
  const MachineLimits limits = measure_machine_limits(3.0);
  print_ceilings(stdout, limits);
  const nlohmann::ordered_json j = run_spec_bench(opt, limits, stdout);
  write_bench_json(args, "spec", &limits, j);
  return 0;
}

int run_dist(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  const long seconds = args.get_int("seconds", 10, 1, 3600);
  MYRIAD_REQUIRE(launched_by_mpirun(), kValue,
                 "bench dist: start it under mpirun, e.g. scripts/mpirun.sh -np 2 myriad bench dist");
  Communicator& world = mpi_world();
  const std::vector<DistBenchRow> rows = run_dist_bench(world, double(seconds));
  if (world.rank() != 0) return 0;
  std::printf("myriad bench dist: %d ranks, %d threads each; each figure the best repeat of the slowest rank\n\n",
              world.size(), num_threads());
  std::printf("%-17s %-34s %10s %10s %10s %9s %7s\n", "what", "shape", "MB/rank", "ours ms", "base ms", "ours GB/s",
              "ratio");
  int met = 0, targeted = 0;
  for (const DistBenchRow& r : rows) {
    targeted += r.targeted;
    met += r.targeted && r.pass();
    std::printf("%-17s %-34s %10.2f %10.3f %10.3f %9.2f %6.2fx%s\n", r.what.c_str(), r.shape.c_str(),
                r.bytes_per_rank / 1e6, r.ours_s * 1e3, r.mpi_s * 1e3, r.bytes_per_rank / r.ours_s / 1e9, r.ratio(),
                !r.targeted ? "  (vs 2 raw all-to-alls)"
                : r.pass()  ? ""
                            : "  below target");
  }
  std::printf("\n%d of %d all-to-all rows within 10%% of MPI_Alltoallv on the same buffers\n", met, targeted);
  if (args.has("json")) {
    nlohmann::ordered_json j;
    j["ranks"] = world.size();
    for (const DistBenchRow& r : rows)
      j["rows"].push_back({{"what", r.what},
                           {"shape", r.shape},
                           {"bytes_per_rank", r.bytes_per_rank},
                           {"ours_s", r.ours_s},
                           {"baseline_s", r.mpi_s},
                           {"ratio", r.ratio()},
                           {"targeted", r.targeted}});
    write_bench_json(args, "dist", nullptr, j);
  }
  return 0;
}

int run_vision(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  VisionBenchOptions opt;
  opt.config_path = args.get_or("config", opt.config_path);
  opt.patches = args.get_int("patches", opt.patches, 4, 1 << 16);
  opt.layers = args.get_int("layers", opt.layers, 0, 1000);
  const long seconds = args.get_int("seconds", 20, 1, 3600);
  opt.budget_s = double(seconds);
  (void)load_model_config(opt.config_path, nullptr);  // config errors before the ceilings are measured
  std::printf("myriad bench vision: %d threads, ~%ld s of timed repeats (best of repeats after one warm-up call)\n",
              num_threads(), seconds);
  const MachineLimits limits = measure_machine_limits(3.0);
  print_ceilings(stdout, limits);
  const VisionBenchResult res = run_vision_bench(opt, limits, stdout);
  write_bench_json(args, "vision", &limits, res.json);
  return 0;
}

int run_longctx(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  LongctxBenchOptions opt;
  opt.config_path = args.get_or("config", opt.config_path);
  if (const auto v = args.get("context")) {
    const std::vector<int64_t> n = parse_token_lengths(*v);
    MYRIAD_REQUIRE(n.size() == 1, kValue, "bench longctx: --context takes one length, got '", *v, "'");
    opt.context = n[0];
  }
  opt.chunk = args.get_int("chunk", opt.chunk, 1, 1 << 20);
  opt.decode = args.get_int("decode", opt.decode, 1, 4096);
  if (const auto v = args.get("at")) opt.at = parse_token_lengths(*v);
  const std::string cache = args.get_choice("cache", "q8", {"f32", "bf16", "q8"});
  opt.cache = cache == "f32" ? DType::kF32 : cache == "bf16" ? DType::kBF16 : DType::kQ8_0;
  opt.dense = args.has("dense");
  (void)load_model_config(opt.config_path, nullptr);  // config errors before the ceilings are measured
  std::printf("myriad bench longctx: %d threads\n", num_threads());
  const MachineLimits limits = measure_machine_limits(2.0);
  print_ceilings(stdout, limits);
  const nlohmann::ordered_json res = run_longctx_bench(opt, limits, stdout);
  write_bench_json(args, "longctx", &limits, res);
  return 0;
}

int run_bench(const myriad::cli::Args& args) {
  const auto& pos = args.positional();
  MYRIAD_REQUIRE(pos.size() == 1 && (pos[0] == "ops" || pos[0] == "model" || pos[0] == "serve" || pos[0] == "dist" ||
                                     pos[0] == "vision" || pos[0] == "longctx" || pos[0] == "spec"),
                 kValue, "bench: expected one benchmark name (ops, model, serve, spec, dist, vision or longctx), got ",
                 pos.empty() ? std::string("none") : "'" + pos[0] + "'" + (pos.size() > 1 ? " and more" : ""));
  if (pos[0] == "serve") return run_serve(args);
  if (pos[0] == "spec") return run_spec(args);
  if (pos[0] == "vision") return run_vision(args);
  if (pos[0] == "longctx") return run_longctx(args);
  if (pos[0] == "dist") return run_dist(args);
  return pos[0] == "ops" ? run_ops(args) : run_model(args);
}

}  // namespace

MYRIAD_COMMAND(
    "bench", "benchmark the CPU kernels or a whole model against this machine's FMA peak and memory ceilings",
    "myriad bench ops [--seconds S] [--json FILE]\n"
    "       myriad bench model --config FILE [--seq T] [--seconds S] [--json FILE]\n"
    "       myriad bench serve (--model DIR | --config FILE) [--formats LIST] [--seconds S] [--json FILE]\n"
    "       myriad bench spec --model DIR [--draft-model DIR] [--spec-tokens K] [--tokens N] [--rounds R] "
    "[--doc-tokens N] [--json FILE]\n"
    "       mpirun -np N myriad bench dist [--seconds S] [--json FILE]   (scripts/mpirun.sh here)\n"
    "       myriad bench vision [--config FILE] [--patches N] [--layers L] [--seconds S] [--json FILE]\n"
    "       myriad bench longctx [--config FILE] [--context N] [--chunk T] [--cache q8] [--decode N] [--at LIST]"
    " [--dense] [--json FILE]",
    {{"seconds", "S",
      "seconds of timed repeats, all rows together (ops: default 20, about 30 s in all; model: default 40, "
      "about 65 s in all for configs/small.json on 2 cores)"},
     {"json", "FILE", "also write the figures as JSON (to FILE.tmp, then renamed)"},
     {"config", "FILE", "model, serve: the model config.json (or a directory holding one); serve: random init"},
     {"formats", "LIST", "serve: weight formats to time, of f32,q8,q4,mxfp4 (default f32,q8,q4)"},
     {"model", "DIR", "serve: a plain model directory or run (quantized forms are made from it); spec: the target"},
     {"draft-model", "DIR", "spec: a draft model with the target's tokenizer (myriad distill)"},
     {"spec-tokens", "K", "spec: drafted tokens verified per step (default 6)"},
     {"tokens", "N", "spec: tokens generated per request (default 192; 96 at batch 16)"},
     {"rounds", "R", "spec: interleaved plain / speculative repeats per row (default 3)"},
     {"doc-tokens", "N", "spec: the copy task's document (default 1024)"},
     {"seq", "T", "model: tokens in the sequence (default min(1024, max_position_embeddings))"},
     {"patches", "N", "vision: patches of the one image timed (default 1024: 448 x 448 pixels at patch 14)"},
     {"layers", "L", "vision: tower blocks timed (default 2; 0: all)"},
     {"context", "N", "longctx: prompt tokens prefilled (default 1M = 1048576; K and M suffixes)"},
     {"chunk", "T", "longctx: prefill chunk (default 4096)"},
     {"cache", "DTYPE", "longctx: MLA latent cache f32, bf16 or q8 (default q8)"},
     {"decode", "N",
      "longctx: decode steps timed at each length (medians; interleaved with a sequence of the first length) (default "
      "16)"},
     {"at", "LIST", "longctx: lengths where decode is timed (default 1K,32K,256K,1M up to --context)"},
     {"dense", "", "longctx: also time dense MLA decode over the same caches at each length"}},
    run_bench);
