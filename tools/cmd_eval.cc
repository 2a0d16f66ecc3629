// `myriad eval`: next-token loss and perplexity of a model as served (plain or quantized), and with --reference
// the KL divergence of its next-token distributions from another model's (src/serve/evaluate.h). Argument
// parsing only.
#include <cstdio>

#include "cli.h"
#include "deploy/prune.h"
#include "dist/expert_parallel.h"
#include "serve/engine.h"
#include "serve/evaluate.h"

namespace {

int run_eval(const myriad::cli::Args& args) {
  using namespace myriad;
  const auto model_dir = args.get("model");
  const auto data = args.get("data");
  MYRIAD_REQUIRE(model_dir && data, kValue, "eval needs --model DIR and --data PATH");
  // Under mpirun with --ep N: this rank's experts only; every rank evaluates in lockstep, rank 0 prints.
  const std::unique_ptr<ExpertParallelJob> job = start_expert_parallel_job(int(args.get_int("ep", 1, 1, 1 << 20)));
  const auto model = job ? InferenceModel::load(*model_dir, [&](const ModelConfig& c) { return job->filter(c); })
                         : InferenceModel::load(*model_dir);
  if (job) model->set_moe_dispatcher(job->dispatcher.get());
  std::shared_ptr<InferenceModel> reference;
  if (const auto r = args.get("reference")) {
    MYRIAD_REQUIRE(!job, kUnsupported, "eval --reference under --ep: load the reference in a one-process run");
    reference = InferenceModel::load(*r);
  }
  const int64_t max_tokens = args.get_int("max-tokens", 32768, 2, 1L << 40);
  const std::vector<int32_t> tokens =
      read_data_tokens(*data, args.get_or("split", "val"), model->tokenizer(), max_tokens);
  const int64_t window =
      args.get_int("window", std::min<int64_t>(1024, model->config().max_position_embeddings), 1, 1L << 30);
  ServedEvalOptions opt;
  const std::string cache = args.get_choice("cache-dtype", "f32", {"f32", "bf16", "q8"});
  opt.cache_dtype = cache_dtype_from_name(cache);
  opt.decode = args.has("decode");
  const ServedEval e = evaluate_served(*model, tokens, window, reference.get(), opt);
  if (job && !job->root()) return 0;
  std::printf("%s: %lld tokens, loss %.4f nats, perplexity %.4f (%d quantized weights; %s latent cache, %s)\n",
              model_dir->c_str(), (long long)e.tokens, e.loss, e.perplexity, int(model->weights().quantized_count()),
              cache.c_str(), opt.decode ? "token by token" : "one prefill per window");
  if (reference) {
    ServedEvalOptions ref_opt;
    ref_opt.decode = opt.decode;
    const ServedEval base = evaluate_served(*reference, tokens, window, nullptr, ref_opt);
    std::printf(
        "reference %s: perplexity %.4f; change %+.3f%%; KL(reference || model) %.2e nats/token; same top-1 token "
        "%.2f%%\n",
        args.get("reference")->c_str(), base.perplexity, 100.0 * (e.perplexity / base.perplexity - 1.0), e.kl,
        100.0 * e.top1_agree);
  }
  return 0;
}

}  // namespace

MYRIAD_COMMAND("eval", "perplexity of a model as served (plain or quantized); KL divergence from a reference",
               "myriad eval --model DIR --data PATH [--reference DIR] [--max-tokens N] [--window T] [--split val] "
               "[--cache-dtype f32|bf16|q8] [--decode]",
               {{"model", "DIR", "a model directory (plain or quantized) or a run"},
                {"data", "PATH", "text / JSONL files or a directory, or a token-shard directory (its --split)"},
                {"reference", "DIR", "also report the change against this model and the KL divergence from it"},
                {"max-tokens", "N", "tokens evaluated at most (default 32768)"},
                {"window", "T", "tokens per window (default min(1024, max_position_embeddings))"},
                {"split", "NAME", "split of a shard directory: val (default) or train"},
                {"cache-dtype", "f32|bf16|q8", "the model's MLA latent cache (default f32; the reference's is f32)"},
                {"ep", "N", "under mpirun -np N: split the routed experts over the N ranks (rank 0 prints)"},
                {"decode", "",
                 "run every window token by token (the decode path serving uses) instead of one prefill"}},
               run_eval);
