// `myriad eval`: next-token loss and perplexity of a model as served (plain or quantized), and with --reference
// the KL divergence of its next-token distributions from another model's (src/serve/evaluate.h). Argument
// parsing only.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "cli.h"
#include "deploy/prune.h"
#include "dist/expert_parallel.h"
#include "io/atomic_file.h"
#include "report/agent_eval_page.h"
#include "report/longctx_page.h"
#include "serve/engine.h"
#include "serve/evaluate.h"
#include "train/agent_eval.h"
#include "train/image_question_eval.h"
#include "train/image_text_source.h"
#include "train/longctx_eval.h"
#include "train/task_eval.h"

namespace {

// `myriad eval tasks`: the agent evaluation (src/train/agent_eval.h) on a model.
int run_eval_tasks(const myriad::cli::Args& args) {
  using namespace myriad;
  const auto model_dir = args.get("model");
  MYRIAD_REQUIRE(model_dir, kValue, "eval tasks needs --model DIR");
  const auto model = InferenceModel::load(*model_dir, {}, args.get_or("tokenizer", ""));
  AgentEvalOptions o;
  const std::string suite = args.get_or("suite", "builtin");
  if (suite != "builtin") o.tasks = read_agent_suite(suite);
  o.per_family = int(args.get_int("per-family", 8, 1, 100000));
  o.samples = int(args.get_int("samples", 1, 1, 1000));
  o.seed = uint64_t(args.get_int("seed", 1234, 0, 1L << 62));
  o.transcripts = int(args.get_int("transcripts", 1, 0, 1000));
  o.strict_tools = args.has("strict-tools");
  const AgentEvalReport r = evaluate_agent(*model, model->tokenizer(), o);
  nlohmann::json j = r.to_json();
  j["model"] = *model_dir;
  j["suite"] = suite;
  j["transcripts"] = r.transcripts;
  j["strict_tools"] = o.strict_tools;
  if (const auto data = args.get("data")) {  // general ability beside the agent's: next-token loss on text
    const std::vector<int32_t> tokens = read_data_tokens(*data, args.get_or("split", "val"), model->tokenizer(),
                                                         args.get_int("max-tokens", 32768, 2, 1L << 40));
    const ServedEval e =
        evaluate_served(*model, tokens, std::min<int64_t>(1024, model->config().max_position_embeddings), nullptr, {});
    j["val_loss"] = e.loss;
    j["val_tokens"] = e.tokens;
  }
  // The pretraining tasks (data/datasets/tasks.h) as myriad train scores them: what post-training kept of them.
  if (const int per_task = int(args.get_int("text-tasks", 32, 0, 100000)); per_task > 0) {
    const Tokenizer& tok = model->tokenizer();
    const int32_t eot = tok.has_special("<|endoftext|>") ? tok.id_of("<|endoftext|>") : -1;
    const TaskScores s = evaluate_tasks(
        *model, [&tok](const std::string& t) { return tok.encode(t); },
        [&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); }, per_task, o.seed, 8, eot, 1);
    j["text_tasks"] = s.by_name();
    j["text_tasks_per_task"] = per_task;
    for (const TaskSample& x : s.samples)
      j["text_task_samples"].push_back(
          {{"task", task_kind_name(x.kind)}, {"prompt", x.prompt}, {"got", x.got}, {"want", x.want}});
  }
  if (const auto p = args.get("json"))
    write_file_atomic(*p, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (const auto p = args.get("html"))
    write_file_atomic(*p, render_agent_eval_page(j, "myriad eval tasks: " + *model_dir));
  std::printf("%-10s %6s %8s %8s %6s %7s %6s %7s %7s\n", "family", "tasks", "success", "pass@k", "calls", "errors",
              "unsafe", "limited", "valid");
  auto line = [](const std::string& name, const nlohmann::json& f) {
    std::printf("%-10s %6d %7.1f%% %7.1f%% %6.2f %7.2f %6.2f %7.2f %6.1f%%\n", name.c_str(), f["tasks"].get<int>(),
                100 * f["success"].get<double>(), 100 * f["pass_at_k"].get<double>(), f["mean_calls"].get<double>(),
                f["tool_errors"].get<double>(), f["violations"].get<double>(), f["limited"].get<double>(),
                100 * f["valid_call_share"].get<double>());
  };
  for (const auto& [name, f] : j["families"].items()) line(name, f);
  line("all", j);
  if (j.contains("text_tasks")) {
    std::printf("text tasks (%d held-out each, greedy):", j["text_tasks_per_task"].get<int>());
    for (const auto& [name, acc] : j["text_tasks"].items())
      std::printf(" %s %.1f%%", name.c_str(), 100 * acc.get<double>());
    std::printf("\n");
  }
  if (j.contains("val_loss"))
    std::printf("validation loss %.4f nats over %lld tokens\n", j["val_loss"].get<double>(),
                static_cast<long long>(j["val_tokens"].get<int64_t>()));
  std::printf("k = %d, %.1f s, %lld tokens generated\n", r.samples, r.seconds,
              static_cast<long long>(r.generated_tokens));
  return 0;
}

// `myriad eval longctx`: the long-context grid (src/train/longctx_eval.h) on a model.
int run_eval_longctx(const myriad::cli::Args& args) {
  using namespace myriad;
  const auto model_dir = args.get("model");
  MYRIAD_REQUIRE(model_dir, kValue, "eval longctx needs --model DIR");
  LongContextOptions o;
  o.task = parse_long_task(args.get_or("task", "passkey"));
  o.lengths = parse_token_lengths(args.get_or("lengths", "1K,4K"));
  const std::string depths = args.get_or("depths", "0,25,50,75,100");
  for (size_t start = 0; start <= depths.size();) {
    const size_t end = std::min(depths.find(',', start), depths.size());
    const std::string d = depths.substr(start, end - start);
    char* stop = nullptr;
    const long v = std::strtol(d.c_str(), &stop, 10);
    MYRIAD_REQUIRE(!d.empty() && stop && *stop == '\0' && v >= 0 && v <= 100, kValue, "--depths: '", d, "' in '",
                   depths, "' is not a whole percent in 0..100");
    o.depths.push_back(int(v));
    start = end + 1;
  }
  o.samples = int(args.get_int("samples", 4, 1, 100000));
  o.seed = args.get_u64("seed", 1234);
  o.prefill_chunk = args.get_int("prefill-chunk", 2048, 1, 1L << 30);
  const std::string tokenizer = args.get_or("tokenizer", "");
  const auto model = InferenceModel::load(*model_dir, {}, tokenizer);
  check_long_context_options(o, model->config().max_position_embeddings);  // before any prompt is built
  std::printf("%-9s %6s %9s %9s %8s  %s\n", "tokens", "depth", "correct", "accuracy", "seconds",
              "first answer / generated");
  const LongContextReport r = evaluate_long_context(*model, model->tokenizer(), o, [](const LongContextCell& c) {
    std::printf("%-9lld %5d%% %5d / %-2d %8.1f%% %8.1f  %s / '%s'\n", static_cast<long long>(c.length), c.depth,
                c.correct, c.samples, 100 * c.accuracy(), c.seconds, c.answer.c_str(), c.got.c_str());
    std::fflush(stdout);
  });
  nlohmann::json j = r.to_json();
  j["model"] = *model_dir;
  const std::string title = "myriad eval longctx: " + *model_dir;
  if (const auto p = args.get("json"))
    write_file_atomic(*p, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (const auto p = args.get("html")) write_file_atomic(*p, render_longctx_page(j, title));
  if (const auto p = args.get("svg")) write_file_atomic(*p, render_longctx_svg(j));
  std::printf("%s: %.1f%% over %zu cells, %.1f s, %lld prompt tokens\n", j["task"].get<std::string>().c_str(),
              100 * j["accuracy"].get<double>(), r.cells.size(), r.seconds, static_cast<long long>(r.prompt_tokens));
  return 0;
}

// `myriad eval images`: image questions answered by generation (src/train/image_question_eval.h).
int run_eval_images(const myriad::cli::Args& args) {
  using namespace myriad;
  const auto model_dir = args.get("model");
  const auto data = args.get("data");
  MYRIAD_REQUIRE(model_dir && data, kValue, "eval images needs --model DIR and --data FILE.jsonl");
  const auto model = InferenceModel::load(*model_dir, {}, args.get_or("tokenizer", ""));
  require_vision(model->config(), "eval images (the model in " + *model_dir + ")");
  std::vector<ImageTextExample> examples;
  for (const ImageTextRecord& r : read_image_text_records(*data, image_marker(model->config())))
    if (r.kind == ImageTextRecord::Kind::kQuestion)
      examples.push_back(record_example(r, model->config(), model->tokenizer()));
  if (const int64_t limit = args.get_int("limit", 0, 0, 1L << 40); limit > 0 && int64_t(examples.size()) > limit)
    examples.resize(size_t(limit));
  ImageQuestionOptions o;
  o.max_new_tokens = int(args.get_int("max-new-tokens", 8, 1, 1 << 20));
  o.batch = args.get_int("batch", 32, 1, 1 << 20);
  o.keep_samples = args.get_int("show", 8, 0, 1 << 20);
  const ImageQuestionReport r = evaluate_image_questions(*model, model->tokenizer(), examples, o);
  nlohmann::json j = r.to_json();
  j["model"] = *model_dir;
  j["data"] = *data;
  if (const auto p = args.get("json"))
    write_file_atomic(*p, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  for (const auto& s : r.samples)
    std::printf("  %-28s  answered %-10s  truth %-10s  %s\n", ("\"" + s.prompt + "\"").c_str(),
                ("\"" + s.got + "\"").c_str(), ("\"" + s.want + "\"").c_str(), s.got == s.want ? "right" : "WRONG");
  std::printf("%-10s %9s %9s\n", "type", "questions", "accuracy");
  for (const auto& [type, c] : r.by_type)
    std::printf("%-10s %9lld %8.1f%%\n", type.empty() ? "-" : type.c_str(), static_cast<long long>(c.total),
                100 * c.accuracy());
  std::printf("%-10s %9lld %8.1f%%   (%.1f s, %lld tokens generated)\n", "all", static_cast<long long>(r.all.total),
              100 * r.all.accuracy(), r.seconds, static_cast<long long>(r.generated_tokens));
  return 0;
}

// `myriad eval text`: the pretraining tasks (arithmetic, copy, reverse, recall; data/datasets/tasks.h) on held-out
// prompts, greedy, as myriad train scores them: each task's accuracy, and `show` of its prompts drawn at random (the
// seed's own draw, not picked) with the model's answer marked right or WRONG beside the truth. What `make demo` prints.
int run_eval_text(const myriad::cli::Args& args) {
  using namespace myriad;
  const auto model_dir = args.get("model");
  MYRIAD_REQUIRE(model_dir, kValue, "eval text needs --model DIR");
  const auto model = InferenceModel::load(*model_dir, {}, args.get_or("tokenizer", ""));
  const int per_task = int(args.get_int("per-task", 64, 1, 100000));
  const int show = int(args.get_int("show", 3, 0, 100000));
  const uint64_t seed = uint64_t(args.get_int("seed", 1234, 0, 1L << 62));
  const Tokenizer& tok = model->tokenizer();
  const int32_t eot = tok.has_special("<|endoftext|>") ? tok.id_of("<|endoftext|>") : -1;
  const TaskScores s = evaluate_tasks(
      *model, [&tok](const std::string& t) { return tok.encode(t); },
      [&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); }, per_task, seed, 8, eot, per_task);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);  // the draw of the shown samples, apart from the prompts'
  nlohmann::json j = {{"model", *model_dir}, {"per_task", per_task}, {"seed", seed}};
  std::printf("held-out prompts of the pretraining tasks (%d each, greedy, seed %llu; none occurs in training):\n",
              per_task, static_cast<unsigned long long>(seed));
  for (const TaskScore& t : s.tasks) {
    std::vector<const TaskSample*> mine;
    for (const TaskSample& x : s.samples)
      if (x.kind == t.kind) mine.push_back(&x);
    std::shuffle(mine.begin(), mine.end(), rng);
    mine.resize(std::min(mine.size(), size_t(show)));
    const std::string name = task_kind_name(t.kind);
    std::printf("%-11s %5.1f%% right (%d of %d)\n", name.c_str(), 100 * t.accuracy(), t.correct, t.total);
    j["tasks"][name] = {{"accuracy", t.accuracy()}, {"correct", t.correct}, {"total", t.total}};
    for (const TaskSample* x : mine) {
      // One line each: newlines shown as " | ", a long prompt (recall's documents) by its end.
      std::string line;
      for (char ch : x->prompt) line += ch == '\n' ? std::string(" | ") : std::string(1, ch);
      if (line.size() > 72) line = "..." + line.substr(line.size() - 69);
      std::printf("    %-5s  %s %s   (truth: %s)\n", x->correct ? "right" : "WRONG", line.c_str(), x->got.c_str(),
                  x->want.c_str());
      j["tasks"][name]["samples"].push_back(
          {{"prompt", x->prompt}, {"got", x->got}, {"want", x->want}, {"correct", x->correct}});
    }
  }
  if (const auto p = args.get("json"))
    write_file_atomic(*p, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return 0;
}

int run_eval(const myriad::cli::Args& args) {
  using namespace myriad;
  if (!args.positional().empty() && args.positional()[0] == "text") return run_eval_text(args);
  if (!args.positional().empty() && args.positional()[0] == "tasks") return run_eval_tasks(args);
  if (!args.positional().empty() && args.positional()[0] == "images") return run_eval_images(args);
  if (!args.positional().empty() && args.positional()[0] == "longctx") return run_eval_longctx(args);
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "eval: unknown mode '", args.positional()[0],
                 "' (myriad eval --model DIR --data PATH, myriad eval tasks --model DIR, myriad eval text --model "
                 "DIR, myriad eval longctx --model DIR, or myriad eval images --model DIR --data FILE)");
  const auto model_dir = args.get("model");
  const auto data = args.get("data");
  MYRIAD_REQUIRE(model_dir && data, kValue, "eval needs --model DIR and --data PATH");
  // Under mpirun with --ep N: this rank's experts only; every rank evaluates in lockstep, rank 0 prints.
  const std::unique_ptr<ExpertParallelJob> job = start_expert_parallel_job(int(args.get_int("ep", 1, 1, 1 << 20)));
  const std::string tokenizer = args.get_or("tokenizer", "");
  const auto model = job ? InferenceModel::load(
                               *model_dir, [&](const ModelConfig& c) { return job->filter(c); }, tokenizer)
                         : InferenceModel::load(*model_dir, {}, tokenizer);
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

MYRIAD_COMMAND(
    "eval",
    "perplexity of a model as served (plain or quantized); KL divergence from a reference; `eval tasks`: "
    "held-out multi-step tool tasks; `eval text`: the pretraining tasks on held-out prompts, samples marked right "
    "or wrong; `eval longctx`: long-context retrieval by length x depth; `eval images`: image questions answered by "
    "generation",
    "myriad eval --model DIR --data PATH [--reference DIR] [--max-tokens N] [--window T] [--split val] "
    "[--cache-dtype f32|bf16|q8] [--decode]\n       myriad eval tasks --model DIR [--suite builtin|FILE] "
    "[--samples K] [--per-family N] [--text-tasks N] [--strict-tools] [--json F] [--html F] [--data PATH]\n       "
    "myriad eval text --model DIR [--per-task N] [--show K] [--seed S] [--json F]\n       "
    "myriad eval longctx "
    "--model DIR "
    "[--task passkey|multikey|vartrack] [--lengths 1K,4K] [--depths 0,25,50,75,100] [--samples N] "
    "[--seed S] [--prefill-chunk T] [--json F] [--html F] [--svg F]\n       myriad eval images --model DIR "
    "--data FILE.jsonl [--max-new-tokens N] [--batch N] [--limit N] [--show N] [--json F]",
    {{"model", "DIR", "a model directory (plain or quantized) or a run"},
     {"tokenizer", "DIR|FILE",
      "use this tokenizer instead of the model's own (tokenizer.model, tiktoken.model or tokenizer.json)"},
     {"data", "PATH", "text / JSONL files or a directory, or a token-shard directory (its --split)"},
     {"reference", "DIR", "also report the change against this model and the KL divergence from it"},
     {"max-tokens", "N", "tokens evaluated at most (default 32768)"},
     {"window", "T", "tokens per window (default min(1024, max_position_embeddings))"},
     {"split", "NAME", "split of a shard directory: val (default) or train"},
     {"cache-dtype", "f32|bf16|q8", "the model's MLA latent cache (default f32; the reference's is f32)"},
     {"ep", "N", "under mpirun -np N: split the routed experts over the N ranks (rank 0 prints)"},
     {"suite", "FILE", "eval tasks: builtin (default) or JSONL lines {\"family\", \"seed\"}"},
     {"samples", "K",
      "eval tasks: episodes per task (pass@K; K > 1 samples at temperature 0.8); eval longctx: prompts per cell "
      "(default 4)"},
     {"task", "NAME", "eval longctx: passkey (default), multikey or vartrack"},
     {"lengths", "LIST", "eval longctx: prompt lengths in tokens, K = 1024, M = 1048576 (default 1K,4K)"},
     {"depths", "LIST", "eval longctx: where the fact sits, percent of the filler (default 0,25,50,75,100)"},
     {"prefill-chunk", "T", "eval longctx: prompt tokens per prefill forward (default 2048)"},
     {"svg", "FILE", "eval longctx: write the accuracy heatmap as an SVG file"},
     {"per-family", "N", "eval tasks: built-in held-out tasks per family (default 8)"},
     {"seed", "S", "eval tasks / text / longctx: seed of the built-in tasks or prompts (default 1234)"},
     {"per-task", "N", "eval text: held-out prompts per task (default 64)"},
     {"transcripts", "N", "eval tasks: episodes per family kept as text (default 1)"},
     {"text-tasks", "N",
      "eval tasks: also the pretraining tasks (arithmetic, copy, reverse, recall; as myriad train scores them) on N "
      "held-out prompts each (default 32; 0 = off)"},
     {"json", "FILE", "eval tasks / text / longctx: write the report as JSON"},
     {"html", "FILE", "eval tasks / longctx: write the report as an HTML page"},
     {"strict-tools", "",
      "eval tasks: constrained decoding of the tool calls (every call parses, names a tool and follows its schema)"},
     {"decode", "", "run every window token by token (the decode path serving uses) instead of one prefill"},
     {"max-new-tokens", "N", "eval images: tokens an answer may take (default 8)"},
     {"batch", "N", "eval images: questions per batch (default 32)"},
     {"limit", "N", "eval images: the first N questions only (default all)"},
     {"show", "N",
      "eval images: answers printed next to the truth (default 8); eval text: prompts per task drawn at random "
      "and shown marked right or WRONG (default 3)"}},
    run_eval);
