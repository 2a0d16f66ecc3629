// GRPO on the built-in tool tasks: see grpo.h.
#include "rl/grpo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/datasets/corpus.h"
#include "data/datasets/loader.h"
#include "dist/gradient_sync.h"
#include "infer/decode_weights.h"
#include "infer/weight_layout.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "model/config.h"
#include "model/param_spec.h"
#include "model/transformer.h"
#include "rl/grpo_loss.h"
#include "rl/rollout.h"
#include "train/agent_eval.h"
#include "train/optimizer.h"
#include "train/run_checkpoint.h"
#include "train/sharded_checkpoint.h"
#include "train/task_eval.h"
#include "train/training_ranks.h"

namespace fs = std::filesystem;

namespace myriad {

GrpoConfig parse_grpo_config(const nlohmann::json& j, const std::string& source) {
  static const std::set<std::string> kIgnored = {"comment"};
  const JsonSource src{source, UnknownFields::kError, &kIgnored, nullptr};
  MYRIAD_REQUIRE(j.is_object(), kConfig, source, ": the GRPO config must be a JSON object");
  JsonFields o(j, "", src);
  GrpoConfig c;
  c.steps = o.int_or("steps", c.steps);
  c.prompts_per_step = int(o.int_or("prompts_per_step", c.prompts_per_step));
  c.group_size = int(o.int_or("group_size", c.group_size));
  c.temperature = o.double_or("temperature", c.temperature);
  c.lr = o.double_or("lr", c.lr);
  c.warmup_steps = o.int_or("warmup_steps", c.warmup_steps);
  c.weight_decay = o.double_or("weight_decay", c.weight_decay);
  c.beta1 = o.double_or("beta1", c.beta1);
  c.beta2 = o.double_or("beta2", c.beta2);
  c.eps = o.double_or("eps", c.eps);
  c.clip = o.double_or("clip", c.clip);
  c.clip_low = o.double_or("clip_low", c.clip_low);
  c.clip_high = o.double_or("clip_high", c.clip_high);
  c.loss_aggregation = o.choice_or("loss_aggregation", c.loss_aggregation, {"token", "sequence"});
  c.kl_coef = o.double_or("kl_coef", c.kl_coef);
  c.kl_estimator = o.choice_or("kl_estimator", c.kl_estimator, {"k1", "k3"});
  c.ppo_epochs = int(o.int_or("ppo_epochs", c.ppo_epochs));
  if (const nlohmann::json* w = o.opt_object("rewards")) {
    JsonFields r(*w, "rewards", src);
    c.rewards.completion = r.double_or("completion", c.rewards.completion);
    c.rewards.efficiency = r.double_or("efficiency", c.rewards.efficiency);
    c.rewards.safety = r.double_or("safety", c.rewards.safety);
    c.rewards.length = r.double_or("length", c.rewards.length);
    r.finish();
  }
  c.rewards.per_extra_call = o.double_or("per_extra_call", c.rewards.per_extra_call);
  c.rewards.length_tau = o.double_or("length_tau", c.rewards.length_tau);
  c.limits.max_turns = int(o.int_or("max_turns", c.limits.max_turns));
  c.limits.max_tokens = o.int_or("max_tokens", c.limits.max_tokens);
  c.limits.max_reply_tokens = o.int_or("max_reply_tokens", c.limits.max_reply_tokens);
  c.eval_every = o.int_or("eval_every", c.eval_every);
  c.eval_per_family = int(o.int_or("eval_per_family", c.eval_per_family));
  c.checkpoint_every = o.int_or("checkpoint_every", c.checkpoint_every);
  c.keep_checkpoints = o.int_or("keep_checkpoints", c.keep_checkpoints);
  c.seed = o.uint_or("seed", c.seed);
  c.kda_chunk = o.int_or("kda_chunk", c.kda_chunk);
  c.routing_replay = o.bool_or("routing_replay", c.routing_replay);
  c.refill_rounds = int(o.int_or("refill_rounds", c.refill_rounds));
  o.finish();
  const std::pair<const char*, int64_t> positive[] = {{"steps", c.steps},
                                                      {"prompts_per_step", c.prompts_per_step},
                                                      {"group_size", c.group_size},
                                                      {"ppo_epochs", c.ppo_epochs},
                                                      {"max_turns", c.limits.max_turns},
                                                      {"max_tokens", c.limits.max_tokens},
                                                      {"max_reply_tokens", c.limits.max_reply_tokens},
                                                      {"eval_every", c.eval_every},
                                                      {"checkpoint_every", c.checkpoint_every},
                                                      {"keep_checkpoints", c.keep_checkpoints},
                                                      {"kda_chunk", c.kda_chunk}};
  for (const auto& [k, v] : positive) o.at_least(k, v, 1);
  if (c.group_size < 2) o.fail("group_size", c.group_size, "must be >= 2 (advantages are relative to the group)");
  if (c.eval_per_family < 0) o.fail("eval_per_family", c.eval_per_family, "must be >= 0");
  if (!(c.lr > 0) || !std::isfinite(c.lr)) o.fail("lr", c.lr, "must be a positive number");
  if (!(c.temperature > 0) || !std::isfinite(c.temperature)) o.fail("temperature", c.temperature, "must be > 0");
  if (!(c.clip_low >= 0 && c.clip_low < 1)) o.fail("clip_low", c.clip_low, "must lie in [0, 1)");
  if (!(c.clip_high >= 0)) o.fail("clip_high", c.clip_high, "must be >= 0");
  if (!(c.kl_coef >= 0)) o.fail("kl_coef", c.kl_coef, "must be >= 0");
  if (!(c.clip >= 0)) o.fail("clip", c.clip, "must be >= 0 (0 = off)");
  if (c.warmup_steps < 0) o.fail("warmup_steps", c.warmup_steps, "must be >= 0");
  if (c.refill_rounds < 0 || c.refill_rounds > 16) o.fail("refill_rounds", c.refill_rounds, "must lie in 0..16");
  return c;
}

nlohmann::json grpo_config_to_json(const GrpoConfig& c) {
  return {{"steps", c.steps},
          {"prompts_per_step", c.prompts_per_step},
          {"group_size", c.group_size},
          {"temperature", c.temperature},
          {"lr", c.lr},
          {"warmup_steps", c.warmup_steps},
          {"weight_decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"clip", c.clip},
          {"clip_low", c.clip_low},
          {"clip_high", c.clip_high},
          {"loss_aggregation", c.loss_aggregation},
          {"kl_coef", c.kl_coef},
          {"kl_estimator", c.kl_estimator},
          {"ppo_epochs", c.ppo_epochs},
          {"rewards",
           {{"completion", c.rewards.completion},
            {"efficiency", c.rewards.efficiency},
            {"safety", c.rewards.safety},
            {"length", c.rewards.length}}},
          {"per_extra_call", c.rewards.per_extra_call},
          {"length_tau", c.rewards.length_tau},
          {"max_turns", c.limits.max_turns},
          {"max_tokens", c.limits.max_tokens},
          {"max_reply_tokens", c.limits.max_reply_tokens},
          {"eval_every", c.eval_every},
          {"eval_per_family", c.eval_per_family},
          {"checkpoint_every", c.checkpoint_every},
          {"keep_checkpoints", c.keep_checkpoints},
          {"seed", c.seed},
          {"kda_chunk", c.kda_chunk},
          {"routing_replay", c.routing_replay},
          {"refill_rounds", c.refill_rounds}};
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Everything a GRPO run holds between its steps: the ranks and their layout, the run directory, the config, the
// model being trained (and the frozen reference for the KL term), its optimizer and gradient sync, the counters.
struct GrpoRun {
  const GrpoRequest& req;
  std::unique_ptr<TrainingRanks> ranks;
  bool resuming = false;
  std::string out;
  std::string start_ck;  // the checkpoint the run started from (the KL reference)
  std::string ck;        // the checkpoint this process starts from (start_ck, or the run's latest when resuming)
  std::optional<CheckpointModel> source;
  GrpoConfig cfg;
  std::vector<Batch> pretrain_val;
  int per_rank = 0, first_group = 0;  // this rank's block of each step's prompts
  std::unique_ptr<Transformer> model, reference;
  std::unique_ptr<AdamW> adamw;
  std::unique_ptr<GradientSync> sync;
  int64_t step = 0, skipped = 0, end = 0;
  std::string last_checkpoint;
  AgentEvalOptions eval_options;
  SamplingParams sampling;

  explicit GrpoRun(const GrpoRequest& r) : req(r) {}
  const ModelConfig& mc() const { return source->config; }
  const Tokenizer& tok() const { return source->tokenizer; }
  const ParallelDims& dims() const { return req.parallel; }
  Communicator& world() const { return *ranks->world; }
  bool root() const { return ranks->root(); }
  const ProcessGroups& groups() const { return ranks->groups; }
  // Where the statistics of rollouts are summed: over the dp group (one rank per block of prompts) under --ep or
  // --sp, whose ranks roll out the same block; otherwise over the world.
  Communicator& blocks() const { return dims().ep > 1 || dims().sp > 1 ? *groups().dp_group : world(); }
};

// One step's rollouts on this rank: its groups' trajectories, their advantages, which carry a signal.
struct StepRollouts {
  RolloutStats rs;
  std::vector<Trajectory> trajs;
  std::vector<double> advantage;
  std::vector<size_t> kept;
  std::vector<AgentFamily> families;  // each trajectory's task family (step records show where the signal is)
  int dropped = 0, kept_groups = 0, rounds = 0;
};

// One step's update: the policy loss's statistics (over every update; the first alone: the mismatch between the
// engine and the trainer), the objective, the gradient norm, the tokens.
struct StepUpdate {
  PolicyLossStats all, first;
  double objective = 0, gnorm = 0, lr = 0;
  int64_t policy_tokens = 0;   // over the blocks
  int64_t trained_tokens = 0;  // the input positions the forwards ran over the world
  bool finite = true;
};

// Load or resume: the run's metadata (grpo.json), the checkpoint, the config; the ranks checked against each other;
// a new run's directory written; the model, the reference, the optimizer (its state when resuming).
void open_run(GrpoRun& g) {
  const GrpoRequest& req = g.req;
  // Every rank of an mpirun job reads the inputs; rank 0 alone writes (train/training_ranks.h).
  g.ranks = open_training_ranks(req.parallel);
  g.resuming = !req.resume.empty();
  g.out = req.out_dir.empty() ? req.resume : req.out_dir;
  MYRIAD_REQUIRE(!g.out.empty(), kValue, "grpo needs --out DIR (or --resume DIR)");
  nlohmann::json meta;
  if (g.resuming) {
    MYRIAD_REQUIRE(fs::exists(g.out + "/grpo.json"), kIo, g.out, " is not a GRPO run (no grpo.json)");
    meta = parse_json_document(read_file(g.out + "/grpo.json"), g.out + "/grpo.json", ErrorKind::kFormat);
  } else {
    MYRIAD_REQUIRE(!req.model_dir.empty(), kValue, "grpo needs --model DIR (an SFT or training run, or a checkpoint)");
    meta["model_checkpoint"] = fs::absolute(latest_checkpoint(req.model_dir)).string();
    meta["pretrain_data"] = req.pretrain_data.empty() ? std::string() : fs::absolute(req.pretrain_data).string();
  }
  // grpo.json read through JsonFields: a damaged field is one error naming the file and the field.
  const JsonSource meta_src{g.out + "/grpo.json", UnknownFields::kWarn, nullptr, nullptr};
  JsonFields saved(meta, "", meta_src);
  g.start_ck = saved.string_or("model_checkpoint", "");
  MYRIAD_REQUIRE(!g.start_ck.empty(), kFormat, meta_src.name, ": \"model_checkpoint\" is missing or empty");
  g.ck = g.resuming ? latest_checkpoint(g.out) : g.start_ck;
  g.source = open_checkpoint_model(g.ck, g.resuming ? std::string() : req.tokenizer);
  const ModelConfig& mc = g.mc();
  std::string config_path = req.config_path;
  if (config_path.empty() && g.resuming) config_path = g.out + "/grpo_config.json";
  if (!config_path.empty()) {
    g.cfg =
        parse_grpo_config(parse_json_document(read_file(config_path), config_path, ErrorKind::kConfig), config_path);
  }
  GrpoConfig& cfg = g.cfg;
  if (req.steps) cfg.steps = *req.steps;
  if (req.seed) cfg.seed = *req.seed;
  const std::string pretrain_data =
      req.pretrain_data.empty() ? saved.string_or("pretrain_data", "") : req.pretrain_data;
  if (!pretrain_data.empty())
    g.pretrain_val = text_validation_batches(pretrain_data, std::min<int64_t>(256, mc.max_position_embeddings), 8);
  const ParallelDims& dims = g.dims();
  start_training_ranks(*g.ranks, dims, mc, g.source->config_json, [&] {
    MYRIAD_REQUIRE(cfg.prompts_per_step % dims.dp == 0, kConfig, "prompts_per_step ", cfg.prompts_per_step,
                   " does not split evenly over --dp ", dims.dp);
  });
  if (!g.resuming)
    prepare_on_root(*g.ranks, [&] {
      start_run_directory(g.out, req.force);
      write_file_atomic(g.out + "/grpo_config.json", grpo_config_to_json(cfg).dump(1) + "\n");
      write_file_atomic(g.out + "/config.json", g.source->config_json);
      g.tok().save(g.out + "/tokenizer");
      write_file_atomic(g.out + "/grpo.json", meta.dump(1) + "\n");
    });
  // This rank's groups of each step: a contiguous block of the step's prompts per data-parallel index. Under --ep
  // the ep ranks of one index roll out the same block in lockstep (every forward's all-to-all needs them all; the
  // same prompts and seeds give the same tokens, the logits being one process's bit for bit) and split its
  // sequences for the update. Under --sp each sp rank rolls out the block too (the engine runs whole sequences)
  // and trains on its shard of every sequence. Statistics of the rollouts are therefore summed over the dp group
  // (one rank per block), those of the update over the world.
  g.per_rank = cfg.prompts_per_step / dims.dp;
  g.first_group = g.groups().d * g.per_rank;

  g.model = std::make_unique<Transformer>(
      mc, ModelWeights::from_checkpoint(open_model_checkpoint(g.ck, mc), mc, g.ranks->keep));
  if (g.ranks->dispatcher) g.model->set_moe_dispatcher(g.ranks->dispatcher.get());
  if (cfg.kl_coef > 0) {
    g.reference = std::make_unique<Transformer>(
        mc, ModelWeights::from_checkpoint(open_model_checkpoint(g.start_ck, mc), mc, g.ranks->keep));
    if (g.ranks->dispatcher) g.reference->set_moe_dispatcher(g.ranks->dispatcher.get());
  }
  g.adamw = std::make_unique<AdamW>(
      mc, g.model->weights(), AdamWConfig{float(cfg.beta1), float(cfg.beta2), float(cfg.eps), float(cfg.weight_decay)});
  g.sync = std::make_unique<GradientSync>(mc, g.model->weights(), g.ranks->groups);
  if (g.resuming) {
    g.adamw->load(g.ck);
    const nlohmann::json st = read_trainer_state(g.ck);
    g.step = trainer_state_counter(st, "step", g.ck + "/trainer_state.json");
    g.skipped = trainer_state_counter(st, "skipped", g.ck + "/trainer_state.json", 0);
    if (!req.quiet && g.root())
      std::fprintf(stderr, "myriad grpo: resumed from %s at step %lld\n", g.ck.c_str(), (long long)g.step);
  }
  g.last_checkpoint = g.resuming ? g.ck : "";
  g.eval_options.per_family = std::max(1, cfg.eval_per_family);
  g.eval_options.limits = cfg.limits;
  g.eval_options.weights = cfg.rewards;
  if (dims.ep > 1) g.eval_options.lockstep = g.groups().ep_group.get();
  g.end = req.stop_after_step >= 0 ? std::min(cfg.steps, req.stop_after_step) : cfg.steps;
  g.sampling.temperature = float(cfg.temperature);
}

void log_record(const GrpoRun& g, const nlohmann::json& r) {
  if (!g.root()) return;
  std::ofstream o(g.out + "/metrics.jsonl", std::ios::app);
  o << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

void save(GrpoRun& g) {
  if (!g.root() && g.dims().ep == 1) return;  // every rank holds the same weights and optimizer state
  NamedTensors weights;
  for (const auto& [n, v] : g.model->weights().all()) weights.emplace_back(n, v.value());
  CheckpointContents c{g.source->config_json,
                       weights,
                       g.adamw->state_tensors(),
                       g.adamw->steps(),
                       {{"step", g.step}, {"skipped", g.skipped}, {"grpo_config", grpo_config_to_json(g.cfg)}},
                       g.out + "/tokenizer"};
  if (g.dims().ep == 1) {
    g.last_checkpoint = save_run_checkpoint(g.out, g.step, c, g.cfg.keep_checkpoints);
    return;
  }
  const std::string dir =
      save_sharded_run_checkpoint(g.groups(), g.mc(), g.out, g.step, c, nullptr, g.cfg.keep_checkpoints);
  if (g.root()) g.last_checkpoint = dir;
}

// The held-out agent tasks (and the pretraining validation loss) on the weights as they are; logged.
nlohmann::json evaluate(GrpoRun& g) {
  nlohmann::json e = {{"type", "eval"}, {"step", g.step}};
  // Rank 0 evaluates; the others wait for it in the next step's first collective. Under --ep rank 0's ep group
  // (data-parallel index 0) evaluates with it in lockstep: each holds a slice of the experts.
  if (!(g.root() || (g.dims().ep > 1 && g.groups().d == 0 && g.groups().s == 0))) return e;
  if (g.cfg.eval_per_family > 0) {
    InferenceModel inference(g.mc(), DecodeWeights::from_model(g.model->weights()));
    if (g.ranks->dispatcher) inference.set_moe_dispatcher(g.ranks->dispatcher.get());
    const AgentEvalReport r = evaluate_agent(inference, g.tok(), g.eval_options);
    e["agent"] = r.to_json();
    for (const nlohmann::json& t : r.transcripts)
      log_record(
          g, {{"type", "sample"}, {"step", g.step}, {"prompt", t["prompt"]}, {"text", t["text"]}, {"want", t["want"]}});
  }
  if (!g.pretrain_val.empty()) e["val_loss"] = text_loss(*g.model, g.pretrain_val, g.cfg.kda_chunk);
  log_record(g, e);
  if (!g.req.quiet && g.root()) {
    std::fprintf(stderr, "eval at step %lld: held-out agent tasks %.1f%% (violations %.2f per episode)",
                 (long long)g.step, 100.0 * e.value("agent", nlohmann::json::object()).value("success", 0.0),
                 e.value("agent", nlohmann::json::object()).value("violations", 0.0));
    if (e.contains("val_loss")) std::fprintf(stderr, ", pretraining val loss %.4f", e["val_loss"].get<double>());
    std::fprintf(stderr, "\n");
  }
  return e;
}

double eval_success(const nlohmann::json& e) {
  return e.value("agent", nlohmann::json::object()).value("success", 0.0);
}

// Rollouts on the weights as they are (views: the engine is gone before the update). Advantages within each group;
// groups of equal rewards are dropped. With refill_rounds (dynamic sampling), each round rolls out new prompts in
// place of the dropped groups, until the step has its groups or the rounds run out; round r's prompts and draws come
// from (seed, step, r), so a resumed run repeats them exactly.
StepRollouts roll_out(GrpoRun& g) {
  const GrpoConfig& cfg = g.cfg;
  StepRollouts r;
  auto engine_model = std::make_shared<InferenceModel>(g.mc(), DecodeWeights::from_model(g.model->weights()), g.tok());
  if (g.ranks->dispatcher) engine_model->set_moe_dispatcher(g.ranks->dispatcher.get());
  std::shared_ptr<const InferenceModel> inference = engine_model;
  for (int round = 0;; ++round) {
    const uint64_t round_seed =
        round == 0 ? uint64_t(g.step) : mix_seed(uint64_t(g.step), 0x72656669ull + uint64_t(round));
    const std::vector<AgentTask> all_tasks =
        agent_tasks(mix_seed(cfg.seed, round_seed), cfg.prompts_per_step, AgentSplit::kTrain);
    const int want = g.per_rank - r.kept_groups;
    const std::vector<AgentTask> tasks(all_tasks.begin() + g.first_group, all_tasks.begin() + g.first_group + want);
    std::vector<Trajectory> got =
        rollout_groups(inference, g.tok(), tasks, cfg.group_size, g.sampling, mix_seed(cfg.seed ^ 0x6770u, round_seed),
                       cfg.limits, cfg.rewards, &r.rs, g.first_group, cfg.routing_replay);
    const size_t base = r.trajs.size();
    for (Trajectory& t : got) r.trajs.push_back(std::move(t));
    for (const AgentTask& t : tasks) r.families.insert(r.families.end(), size_t(cfg.group_size), t.family);
    r.advantage.resize(r.trajs.size(), 0.0);
    for (int grp = 0; grp < want; ++grp) {
      double mean = 0, var = 0;
      const size_t a = base + size_t(grp) * size_t(cfg.group_size), b = a + size_t(cfg.group_size);
      for (size_t i = a; i < b; ++i) mean += r.trajs[i].outcome.total;
      mean /= cfg.group_size;
      for (size_t i = a; i < b; ++i) var += (r.trajs[i].outcome.total - mean) * (r.trajs[i].outcome.total - mean);
      const double sd = std::sqrt(var / cfg.group_size);
      if (sd < 1e-9) {
        ++r.dropped;
        continue;
      }
      ++r.kept_groups;
      for (size_t i = a; i < b; ++i) {
        r.advantage[i] = (r.trajs[i].outcome.total - mean) / sd;
        r.kept.push_back(i);
      }
    }
    r.rounds = round + 1;
    if (r.kept_groups == g.per_rank || round >= cfg.refill_rounds) break;
  }
  return r;
}

// The PPO epochs over the kept trajectories: forwards and backwards, the gradients synchronised, AdamW steps.
StepUpdate update_policy(GrpoRun& g, const StepRollouts& r) {
  const GrpoConfig& cfg = g.cfg;
  const ParallelDims& dims = g.dims();
  StepUpdate u;
  int64_t policy_tokens = 0;
  for (size_t i : r.kept)
    for (size_t t = 1; t < r.trajs[i].policy.size(); ++t) policy_tokens += r.trajs[i].policy[t];
  // Over the blocks: the aggregation's denominators are the step's, not this block's.
  double counts[2] = {double(policy_tokens), double(r.kept.size())};
  g.blocks().all_reduce_f64(counts, 2, ReduceOp::kSum);
  // This rank's share of the block's kept sequences that have a token to learn (the same list on every rank of
  // the block): every ep-th from its ep index. A rank with one fewer runs one more pass with a zero weight (no
  // gradient, no statistics), so that every rank of the ep group makes the same number of forwards and
  // backwards (their all-to-alls are collectives). The sp ranks each run their shard of every one.
  std::vector<size_t> trainable, mine;
  for (size_t i : r.kept)
    if (predicted_policy_tokens(r.trajs[i]) > 0) trainable.push_back(i);
  for (size_t j = size_t(g.groups().e); j < trainable.size(); j += size_t(dims.ep)) mine.push_back(trainable[j]);
  const size_t passes = (trainable.size() + size_t(dims.ep) - 1) / size_t(dims.ep);
  u.policy_tokens = int64_t(counts[0]);
  const int64_t kept_all = int64_t(counts[1]);
  u.lr = cfg.warmup_steps > 0 && g.step < cfg.warmup_steps ? cfg.lr * double(g.step + 1) / double(cfg.warmup_steps)
                                                           : cfg.lr;
  const PolicyLossOptions po{cfg.clip_low,
                             cfg.clip_high,
                             cfg.kl_coef,
                             cfg.kl_estimator,
                             cfg.kda_chunk,
                             cfg.routing_replay,
                             dims.sp > 1 ? g.groups().sp_group.get() : nullptr};
  Transformer& model = *g.model;
  for (int epoch = 0; epoch < cfg.ppo_epochs && kept_all > 0; ++epoch) {
    model.weights().zero_grad();
    PolicyLossStats& stats = epoch == 0 ? u.first : u.all;
    double epoch_objective = 0;
    for (size_t j = 0; j < passes; ++j) {
      if (j >= mine.size()) {  // the ep group's padding pass
        PolicyLossStats ignored;
        policy_loss_backward(model, r.trajs[trainable.front()], 0.0, 0.0, po, g.reference.get(), &ignored);
        continue;
      }
      const size_t i = mine[j];
      const double agg =
          cfg.loss_aggregation == "token"
              ? 1.0 / double(u.policy_tokens)
              : 1.0 / (double(kept_all) * double(std::max<int64_t>(1, predicted_policy_tokens(r.trajs[i]))));
      epoch_objective += policy_loss_backward(model, r.trajs[i], r.advantage[i], agg, po, g.reference.get(), &stats);
    }
    if (g.world().size() > 1) {
      g.sync->all_reduce();
      u.gnorm = g.sync->grad_norm();
      epoch_objective = g.world().all_reduce_value(epoch_objective);
    } else {
      u.gnorm = g.adamw->grad_norm(model.weights());
    }
    u.objective += epoch_objective;
    u.finite = std::isfinite(u.objective) && std::isfinite(u.gnorm);
    if (!u.finite) break;
    const float clip_scale = cfg.clip > 0 && u.gnorm > cfg.clip ? float(cfg.clip / u.gnorm) : 1.0f;
    g.adamw->step(model.weights(), float(u.lr), clip_scale);
  }
  return u;
}

// The step's statistics as sums (the largest mismatch and the slowest rollout as maxima): the update's over the
// world, the rollouts' over the blocks.
void reduce_step_statistics(GrpoRun& g, StepRollouts& r, StepUpdate& u) {
  double sums[] = {u.first.tokens,
                   u.all.tokens,
                   u.first.clipped,
                   u.first.mismatch_sum,
                   u.first.kl_sum,
                   u.all.kl_sum,
                   u.first.input_tokens + u.all.input_tokens,
                   u.all.clipped};
  g.world().all_reduce_f64(sums, int64_t(std::size(sums)), ReduceOp::kSum);
  u.first.tokens = sums[0], u.all.tokens = sums[1], u.first.clipped = sums[2], u.first.mismatch_sum = sums[3];
  u.first.kl_sum = sums[4], u.all.kl_sum = sums[5], u.trained_tokens = int64_t(sums[6]), u.all.clipped = sums[7];
  Communicator& blocks = g.blocks();
  double block_sums[] = {double(r.dropped),          double(r.kept_groups),
                         double(r.rounds),           double(r.rs.generated_tokens),
                         double(r.rs.prompt_tokens), double(r.rs.prefix_tokens_reused)};
  blocks.all_reduce_f64(block_sums, int64_t(std::size(block_sums)), ReduceOp::kSum);
  r.dropped = int(block_sums[0]), r.kept_groups = int(block_sums[1]);
  r.rs.generated_tokens = int64_t(block_sums[3]), r.rs.prompt_tokens = int64_t(block_sums[4]);
  r.rs.prefix_tokens_reused = int64_t(block_sums[5]);
  r.rounds = int(block_sums[2] / blocks.size() + 0.5);  // (a mean over the blocks, each refills its own groups)
  double maxes[] = {u.first.mismatch_max, r.rs.seconds};
  g.world().all_reduce_f64(maxes, 2, ReduceOp::kMax);
  u.first.mismatch_max = maxes[0], r.rs.seconds = maxes[1];
}

// The step's record for metrics.jsonl (the trajectories' rewards and behaviour summed over the blocks, and per task
// family), printed as one line unless quiet.
nlohmann::json step_record(const GrpoRun& g, const StepRollouts& r, const StepUpdate& u, double train_s,
                           double step_s) {
  const GrpoConfig& cfg = g.cfg;
  const double counted = u.first.tokens + u.all.tokens, clipped = u.first.clipped + u.all.clipped;
  const double kl_sum = u.first.kl_sum + u.all.kl_sum;
  const double mismatch_mean = u.first.tokens > 0 ? u.first.mismatch_sum / u.first.tokens : 0.0;
  double rw[5] = {0, 0, 0, 0, 0};
  double success = 0, calls = 0, violations = 0, errors = 0, forged = 0, limited = 0;
  for (const Trajectory& t : r.trajs) {
    const EpisodeOutcome& o = t.outcome;
    rw[0] += o.completion;
    rw[1] += o.efficiency;
    rw[2] += o.safety;
    rw[3] += o.length;
    rw[4] += o.total;
    success += o.success;
    calls += o.calls;
    violations += o.violations();
    errors += o.tool_errors;
    forged += o.limit == "forged_turn";
    limited += !o.limit.empty();
  }
  double traj_sums[] = {rw[0], rw[1],      rw[2],  rw[3],  rw[4],   success,
                        calls, violations, errors, forged, limited, double(r.trajs.size())};
  g.blocks().all_reduce_f64(traj_sums, int64_t(std::size(traj_sums)), ReduceOp::kSum);
  std::copy(traj_sums, traj_sums + 5, rw);
  success = traj_sums[5], calls = traj_sums[6], violations = traj_sums[7], errors = traj_sums[8];
  forged = traj_sums[9], limited = traj_sums[10];
  const double n = traj_sums[11];
  nlohmann::json rec = {{"type", "step"},
                        {"step", g.step},
                        {"loss", -u.objective / std::max(1, cfg.ppo_epochs)},
                        {"lr", u.lr},
                        {"grad_norm", u.gnorm},
                        {"skipped", g.skipped},
                        {"rewards",
                         {{"completion", rw[0] / n},
                          {"efficiency", rw[1] / n},
                          {"safety", rw[2] / n},
                          {"length", rw[3] / n},
                          {"total", rw[4] / n}}},
                        {"success", success / n},
                        {"mean_calls", calls / n},
                        {"violations", violations / n},
                        {"tool_errors", errors / n},
                        {"forged_turns", forged / n},
                        {"limited", limited / n},
                        {"groups_dropped", r.dropped},
                        {"groups", cfg.prompts_per_step},
                        {"groups_kept", r.kept_groups},
                        {"rollout_rounds", r.rounds},
                        {"policy_tokens", u.policy_tokens},
                        {"clip_fraction", counted > 0 ? clipped / counted : 0.0},
                        {"logprob_mismatch_mean", mismatch_mean},
                        {"logprob_mismatch_max", u.first.mismatch_max},
                        {"rollout_s", r.rs.seconds},
                        {"rollout_tokens_per_s", r.rs.generated_tokens / std::max(r.rs.seconds, 1e-9)},
                        {"rollout_prefix_reused_tokens", r.rs.prefix_tokens_reused},
                        {"rollout_prompt_tokens", r.rs.prompt_tokens},
                        {"train_s", train_s},
                        {"train_tokens_per_s", double(u.trained_tokens) / std::max(train_s, 1e-9)},
                        {"time_s", step_s}};
  if (g.reference) rec["kl"] = counted > 0 ? kl_sum / counted : 0.0;
  {  // Episodes and success per task family, over the blocks.
    constexpr size_t kFamilies = std::size(kAgentFamilies);
    double per[2 * kFamilies] = {};
    for (size_t i = 0; i < r.trajs.size(); ++i) {
      const auto f = size_t(r.families[i]);  // kAgentFamilies lists the enum in order (agent_tasks.h)
      per[2 * f] += 1;
      per[2 * f + 1] += r.trajs[i].outcome.success;
    }
    g.blocks().all_reduce_f64(per, int64_t(std::size(per)), ReduceOp::kSum);
    nlohmann::json by_family = nlohmann::json::object();
    for (size_t f = 0; f < kFamilies; ++f)
      if (per[2 * f] > 0)
        by_family[agent_family_name(kAgentFamilies[f])] = {{"episodes", per[2 * f]},
                                                           {"success", per[2 * f + 1] / per[2 * f]}};
    rec["families"] = std::move(by_family);
  }
  if (!g.req.quiet && g.root())
    std::fprintf(stderr,
                 "step %lld/%lld  reward %.3f  success %.0f%%  calls %.2f  violations %.2f  kept %d/%d (dropped %d)  "
                 "clip %.3f  mismatch %.1e  rollout %.0f tok/s  train %.0f tok/s\n",
                 (long long)g.step, (long long)g.end, rw[4] / n, 100 * success / n, calls / n, violations / n,
                 r.kept_groups, cfg.prompts_per_step, r.dropped, counted > 0 ? clipped / counted : 0.0, mismatch_mean,
                 r.rs.generated_tokens / std::max(r.rs.seconds, 1e-9),
                 double(u.trained_tokens) / std::max(train_s, 1e-9));
  return rec;
}

}  // namespace

// The run in its phases: open (load or resume), evaluate before the first step, then per step: roll out, update,
// reduce the statistics, record; evaluate and save on their schedules.
GrpoSummary run_grpo(const GrpoRequest& req) {
  GrpoRun g(req);
  open_run(g);
  GrpoSummary summary;
  if (g.step == 0) summary.first_success = eval_success(evaluate(g));
  while (g.step < g.end) {
    const auto t_step = std::chrono::steady_clock::now();
    StepRollouts r = roll_out(g);
    const auto t_train = std::chrono::steady_clock::now();
    StepUpdate u = update_policy(g, r);
    reduce_step_statistics(g, r, u);
    if (!u.finite) ++g.skipped;
    ++g.step;
    const double train_s = seconds_since(t_train);
    log_record(g, step_record(g, r, u, train_s, seconds_since(t_step)));
    if (g.step % g.cfg.eval_every == 0 || g.step == g.end) summary.last_success = eval_success(evaluate(g));
    if (g.step % g.cfg.checkpoint_every == 0 || g.step == g.end) save(g);
  }
  summary.steps = g.step;
  summary.root = g.root();
  summary.last_checkpoint = g.last_checkpoint;
  return summary;
}

}  // namespace myriad
