// `myriad sft`: argument parsing only; the run is src/train/sft.cc.
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "parallel_flags.h"
#include "train/sft.h"

namespace {

int run_sft_command(const myriad::cli::Args& args) {
  myriad::SftRequest r;
  r.model_dir = args.get_or("model", "");
  r.tokenizer = args.get_or("tokenizer", "");
  r.data_path = args.get_or("data", "");
  r.val_path = args.get_or("val", "");
  r.out_dir = args.get_or("out", "");
  r.resume = args.get_or("resume", "");
  r.train_config_path = args.get_or("train-config", "");
  r.force = args.has("force");
  r.quiet = args.has("quiet");
  r.stop_after_step = args.get_int("stop-after", -1, -1, 1L << 40);
  if (args.has("seed")) r.seed = uint64_t(args.get_int("seed", 0, 0, 1L << 62));
  if (args.has("steps")) r.steps = args.get_int("steps", 0, 1, 1L << 40);
  r.agent_eval_per_family = int(args.get_int("agent-eval", 4, 0, 10000));
  r.pretrain_data = args.get_or("pretrain-data", "");
  r.pretrain_mix = args.get_double("pretrain-mix", r.pretrain_mix, 0, 1, false, /*open_max=*/true);
  r.parallel = myriad::cli::parallel_training(args);
  const myriad::TrainSummary s = myriad::run_sft(r);
  if (!s.root) return 0;  // rank 0 reports
  std::printf(
      "fine-tuned %lld steps (%lld skipped): loss %.4f, val loss %.4f; %.0f tokens/s\nrun: %s; last "
      "checkpoint: %s\n",
      (long long)s.steps, (long long)s.skipped, s.last_loss, s.last_val_loss, s.tokens_per_s,
      (r.out_dir.empty() ? r.resume : r.out_dir).c_str(), s.last_checkpoint.c_str());
  myriad::cli::print_parallel_summary(r.parallel.dims, s);
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "sft", "supervised fine-tuning on conversations (loss on the assistant's tokens, tool calls included)",
    "myriad sft --model DIR --data FILE.jsonl --out DIR [--val FILE.jsonl] [--train-config F] [--steps N] "
    "[--resume DIR]",
    myriad::cli::with_parallel_options(
        {{"model", "DIR", "the model to fine-tune: a training run or a checkpoint"},
         {"tokenizer", "DIR|FILE", "a tokenizer other than the model's (any kind myriad reads)"},
         {"data", "FILE", "conversations, one {\"messages\": [...], \"tools\": [...]} per line (OpenAI format)"},
         {"val", "FILE", "validation conversations (default: every 20th of --data)"},
         {"out", "DIR", "run directory (metrics.jsonl, checkpoints/, sft.json)"},
         {"train-config", "FILE", "training config (default: one stage of 512 tokens, 300 steps, lr 1e-3)"},
         {"steps", "N", "steps of the (one-stage) training config"},
         {"resume", "DIR", "continue an SFT run exactly where it stopped"},
         {"seed", "S", "data order (overrides the training config)"},
         {"pretrain-data", "DIR", "a prepared shard directory of pretraining text: its val loss at each eval"},
         {"pretrain-mix", "F", "fraction of rows taken from --pretrain-data (keeps general ability; 0..1)"},
         {"agent-eval", "N", "held-out tool tasks per family at each evaluation (default 4; 0 = off)"},
         {"stop-after", "N", "stop after N steps in total (checkpointed)"},
         {"force", "", "replace an existing run directory"},
         {"quiet", "", "no progress line"}}),
    run_sft_command);
