// `myriad train`: argument parsing only; the run is set up in src/train/run.cc.
#include <algorithm>
#include <cstdio>

#include "cli.h"
#include "parallel_flags.h"
#include "train/run.h"

namespace {

int run_train(const myriad::cli::Args& args) {
  myriad::RunRequest r;
  r.model_config_path = args.get_or("config", "");
  MYRIAD_REQUIRE(!r.model_config_path.empty(), kValue, "train needs --config FILE (e.g. configs/tiny.json)");
  r.train_config_path = args.get_or("train-config", "");
  if (auto d = args.get("data")) r.data.push_back(*d);
  for (const auto& p : args.positional()) r.data.push_back(p);
  r.tokenizer_dir = args.get_or("tokenizer", "");
  r.out_dir = args.get_or("out", "");
  r.resume = args.get_or("resume", "");
  if (!r.resume.empty() && r.out_dir.empty()) r.out_dir = r.resume;
  r.init = args.get_or("init", "");
  MYRIAD_REQUIRE(r.init.empty() || r.resume.empty(), kValue,
                 "train: --init starts a new run from trained weights, --resume continues one: give one of them");
  r.force = args.has("force");
  r.quiet = args.has("quiet");
  r.memory_profile = args.has("memory-profile");
  r.stop_after_step = args.get_int("stop-after", -1, -1, 1L << 40);
  if (args.has("seed")) r.seed = uint64_t(args.get_int("seed", 0, 0, 1L << 62));
  if (args.has("gradient-checkpointing")) r.gradient_checkpointing = true;
  r.parallel = myriad::cli::parallel_training(args);
  const myriad::TrainSummary s = myriad::run_training(r);
  if (!s.root) return 0;  // rank 0 reports
  std::printf(
      "trained %lld steps (%lld skipped): loss %.4f, val loss %.4f, %.3f bits/byte; %.0f tokens/s, MFU %.1f%% "
      "of the %.0f GFLOP/s f32 FMA peak\nrun: %s (metrics.jsonl, checkpoints/, tokenizer/); last checkpoint: %s\n",
      (long long)s.steps, (long long)s.skipped, s.last_loss, s.last_val_loss, s.last_val_bpb, s.tokens_per_s,
      100.0 * s.mfu, s.peak_gflops, r.out_dir.c_str(), s.last_checkpoint.c_str());
  myriad::cli::print_parallel_summary(r.parallel.dims, s);
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "train", "train a model (built-in corpus when no data is given)",
    "myriad train --config F [--data PATH ...] --out runs/NAME [--train-config F] [--resume DIR | --init DIR]",
    myriad::cli::with_parallel_options(
        {{"config", "FILE", "model config.json (configs/tiny.json, configs/small.json, ...)"},
         {"train-config", "FILE", "training config (default: <config>.train.json beside it, else 256/1K ladder)"},
         {"data", "PATH", "text/JSONL files or directories, or a prepared shard directory (also positional)"},
         {"tokenizer", "DIR", "use this tokenizer (default: train one on the data)"},
         {"out", "DIR", "run directory (metrics.jsonl, checkpoints/, tokenizer/)"},
         {"resume", "DIR", "continue a run (or a checkpoint) exactly where it stopped"},
         {"init", "DIR",
          "start from the weights of a run's last checkpoint (or a checkpoint): a new schedule, optimizer and data "
          "order (the next rung of a context ladder); its tokenizer unless --tokenizer"},
         {"seed", "S", "seed for init and data order (overrides the training config)"},
         {"gradient-checkpointing", "", "recompute each layer in backward (less memory)"},
         {"memory-profile", "",
          "split the first step's tensor memory at its peak by model part and phase (stderr, metrics.jsonl)"},
         {"stop-after", "N", "stop after N steps in total (checkpointed), e.g. to test resumption"},
         {"force", "", "replace an existing run directory"},
         {"quiet", "", "no progress line"}}),
    run_train);
