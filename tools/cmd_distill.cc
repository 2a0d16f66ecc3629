// `myriad distill`: argument parsing only; the run is src/train/distill.cc.
#include <cstdio>

#include "cli.h"
#include "train/distill.h"

namespace {

int run_distill_command(const myriad::cli::Args& args) {
  myriad::DistillRequest r;
  r.teacher = args.get_or("teacher", "");
  r.draft_config = args.get_or("config", "");
  r.data = args.get_or("data", "");
  r.out_dir = args.get_or("out", "");
  r.resume = args.get_or("resume", "");
  r.train_config_path = args.get_or("train-config", "");
  r.generated_share = args.get_double("generated-share", r.generated_share, 0, 1);
  r.temperature = float(args.get_double("temperature", r.temperature, 0, 100, /*open_min=*/true));
  r.force = args.has("force");
  r.quiet = args.has("quiet");
  r.stop_after_step = args.get_int("stop-after", -1, -1, 1L << 40);
  if (args.has("seed")) r.seed = uint64_t(args.get_int("seed", 0, 0, 1L << 62));
  if (args.has("steps")) r.steps = args.get_int("steps", 0, 1, 1L << 40);
  const myriad::TrainSummary s = myriad::run_distill(r);
  std::printf(
      "distilled %lld steps (%lld skipped): loss %.4f, val loss %.4f (cross entropy against the teacher); "
      "%.0f tokens/s\nrun: %s; last checkpoint: %s (serve it with --draft-model)\n",
      (long long)s.steps, (long long)s.skipped, s.last_loss, s.last_val_loss, s.tokens_per_s,
      (r.out_dir.empty() ? r.resume : r.out_dir).c_str(), s.last_checkpoint.c_str());
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "distill",
    "train a small draft model for speculative decoding on a teacher's next-token distributions and generations",
    "myriad distill --teacher DIR --config DRAFT.json --out DIR [--data SHARDS] [--train-config F] [--steps N] "
    "[--generated-share F] [--temperature T] [--resume DIR]",
    {{"teacher", "DIR", "the target model: a model directory or a training run (its latest checkpoint)"},
     {"config", "FILE", "the draft's model config (its vocab_size is set to the teacher's)"},
     {"data", "DIR", "prepared shards for the sequences (default: the teacher run's own data/)"},
     {"out", "DIR", "run directory (metrics.jsonl, checkpoints/, distill.json)"},
     {"train-config", "FILE", "training config (default: one stage of 256 tokens, 300 steps, batch 4096 tokens)"},
     {"steps", "N", "steps of the (one-stage) training config"},
     {"generated-share", "F", "fraction of sequences whose second half the teacher generates (default 0.125)"},
     {"temperature", "T", "of the teacher's distributions and generations (default 1)"},
     {"resume", "DIR", "continue a distill run exactly where it stopped"},
     {"seed", "S", "data order and initialisation (overrides the training config)"},
     {"stop-after", "N", "stop after N steps in total (checkpointed)"},
     {"force", "", "replace an existing run directory"},
     {"quiet", "", "no progress line"}},
    run_distill_command);
