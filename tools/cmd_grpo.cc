// `myriad grpo`: argument parsing only; the run is src/rl/grpo.cc.
#include <cstdio>

#include "cli.h"
#include "parallel_flags.h"
#include "rl/grpo.h"

namespace {

int run_grpo_command(const myriad::cli::Args& args) {
  myriad::GrpoRequest r;
  r.model_dir = args.get_or("model", "");
  r.tokenizer = args.get_or("tokenizer", "");
  r.out_dir = args.get_or("out", "");
  r.resume = args.get_or("resume", "");
  r.config_path = args.get_or("train-config", "");
  r.pretrain_data = args.get_or("pretrain-data", "");
  r.force = args.has("force");
  r.quiet = args.has("quiet");
  r.stop_after_step = args.get_int("stop-after", -1, -1, 1L << 40);
  if (args.has("steps")) r.steps = args.get_int("steps", 0, 1, 1L << 40);
  if (args.has("seed")) r.seed = uint64_t(args.get_int("seed", 0, 0, 1L << 62));
  r.parallel = myriad::cli::parallel_dims(args);
  const myriad::GrpoSummary s = myriad::run_grpo(r);
  if (!s.root) return 0;  // rank 0 reports
  std::printf(
      "GRPO: %lld steps; held-out agent success %.1f%% before, %.1f%% at the last evaluation\nrun: %s; last "
      "checkpoint: %s\n",
      (long long)s.steps, 100.0 * s.first_success, 100.0 * s.last_success,
      (r.out_dir.empty() ? r.resume : r.out_dir).c_str(), s.last_checkpoint.c_str());
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "grpo", "GRPO reinforcement learning on the built-in tool tasks (multi-turn rollouts, four rewards)",
    "myriad grpo --model DIR --out DIR [--train-config grpo.json] [--steps N] [--pretrain-data DIR] "
    "[--resume DIR]",
    {{"model", "DIR", "the model to train: an SFT or training run, or a checkpoint"},
     {"tokenizer", "DIR|FILE", "a tokenizer other than the model's (any kind myriad reads)"},
     {"out", "DIR", "run directory (metrics.jsonl, checkpoints/, grpo.json)"},
     {"train-config", "FILE", "GRPO config (docs/post_training.md; default: built-in)"},
     {"steps", "N", "steps (overrides the config)"},
     {"seed", "S", "seed of the tasks and rollouts (overrides the config)"},
     {"pretrain-data", "DIR", "a prepared shard directory: pretraining validation loss at each eval"},
     {"resume", "DIR", "continue a GRPO run exactly where it stopped"},
     {"stop-after", "N", "stop after N steps in total (checkpointed)"},
     {"dp", "N", "data-parallel ranks under mpirun: each rolls out and trains on prompts_per_step / N groups"},
     {"ep", "N",
      "expert-parallel ranks under mpirun (each holds num_experts / N routed experts): the N ranks of a "
      "data-parallel block roll it out in lockstep and split its sequences for the update; the checkpoint "
      "is sharded"},
     {"sp", "N",
      "sequence-parallel ranks under mpirun: each rolls out its block whole and trains on its shard of every "
      "sequence"},
     {"force", "", "replace an existing run directory"},
     {"quiet", "", "no progress lines"}},
    run_grpo_command);
