#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/memory_profile.h"
#include "dist/expert_parallel.h"
#include "dist/routing_sync.h"
#include "dist/sequence_parallel.h"
#include "io/checkpoint.h"
#include "io/checksums.h"
#include "model/accounting.h"
#include "model/balancing.h"
#include "model/param_spec.h"
#include "ops/machine_limits.h"
#include "train/run_checkpoint.h"
#include "train/sharded_checkpoint.h"

namespace myriad {

namespace {

AdamWConfig adamw_config(const TrainConfig& c) {
  return AdamWConfig{float(c.beta1), float(c.beta2), float(c.eps), float(c.weight_decay)};
}

// This process's resident memory now and at its peak (bytes), from /proc/self/status; 0 where unknown.
std::pair<double, double> resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  double now = 0, peak = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) now = std::strtod(line.c_str() + 6, nullptr) * 1024.0;
    if (line.rfind("VmHWM:", 0) == 0) peak = std::strtod(line.c_str() + 6, nullptr) * 1024.0;
  }
  return {now, peak};
}

// Shard s of sp of a batch: tokens and targets [s T / sp, (s + 1) T / sp), with the whole sequence's images (every
// rank runs the vision tower on all of them, a small model beside the text one, and places the rows its shard's
// placeholders take; the tower's gradients are summed over the ranks with the rest).
TrainBatch shard_of(const TrainBatch& b, int s, int sp, const ModelConfig& c) {
  const int64_t T = b.tokens.numel() / sp;
  TrainBatch shard{b.tokens.slice(0, s * T, (s + 1) * T).contiguous(),
                   b.targets.slice(0, s * T, (s + 1) * T).contiguous(),
                   b.patches,
                   b.grids,
                   true,
                   b.image_row_offset,
                   b.teacher_probs.defined() ? b.teacher_probs.slice(0, s * T, (s + 1) * T).contiguous() : Tensor()};
  if (b.patches.defined() && c.media_placeholder_token_id) {
    const int64_t* ids = b.tokens.contiguous().data<int64_t>();
    shard.image_row_offset += std::count(ids, ids + s * T, *c.media_placeholder_token_id);
  }
  return shard;
}

int64_t counted_targets(const TrainBatch& b) {
  int64_t n = 0;
  const int64_t* t = b.targets.data<int64_t>();
  for (int64_t i = 0; i < b.targets.numel(); ++i) n += t[i] != -100;
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string format_eta(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(s) % 60);
  return buf;
}

// One line for an eval record: the validation loss and whatever the task evaluations added.
std::string eval_summary(const nlohmann::json& e) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "val loss %.4f, %.3f bits/byte", e.value("val_loss", 0.0), e.value("val_bpb", 0.0));
  std::string out = buf;
  if (e.contains("tasks"))
    for (const auto& [k, v] : e["tasks"].items()) {
      std::snprintf(buf, sizeof buf, ", %s %.0f%%", k.c_str(), 100.0 * v.get<double>());
      out += buf;
    }
  if (e.contains("agent")) {
    std::snprintf(buf, sizeof buf, ", agent tasks %.0f%% (violations %.2f per episode)",
                  100.0 * e["agent"].value("success", 0.0), e["agent"].value("violations", 0.0));
    out += buf;
  }
  if (e.contains("pretrain_val_loss")) {
    std::snprintf(buf, sizeof buf, ", pretraining text loss %.4f", e["pretrain_val_loss"].get<double>());
    out += buf;
  }
  return out;
}

}  // namespace

void validate_data_parallel_split(const TrainConfig& config, const ParallelDims& dims) {
  const int64_t data_ranks = dims.data_ranks();
  for (int64_t s = 0; s < int64_t(config.stages.size()); ++s)
    MYRIAD_REQUIRE(config.sequences_per_step(s) % data_ranks == 0, kConfig, "stage ", s, " trains ",
                   config.sequences_per_step(s), " sequences per step, which do not split evenly over the ", data_ranks,
                   " data ranks of ", dims.str(), ": make sequences per step a multiple of dp x ep = ", data_ranks);
  for (int64_t s = 0; s < int64_t(config.stages.size()); ++s)
    MYRIAD_REQUIRE(config.stages[size_t(s)].seq_len % dims.sp == 0, kConfig, "stage ", s, "'s sequences of ",
                   config.stages[size_t(s)].seq_len, " tokens do not split into --sp ", dims.sp, " equal shards");
}

Trainer::Trainer(Transformer& model, TrainConfig config, BatchSource& data, TrainerOptions options)
    : model_(model), cfg_(std::move(config)), data_(data), opt_(std::move(options)) {
  if (opt_.groups) {
    groups_ = opt_.groups;
  } else {
    own_groups_ = make_process_groups(single_, ParallelDims{});
    groups_ = &own_groups_;
  }
  validate_data_parallel_split(cfg_, groups_->dims);
  sync_ = std::make_unique<GradientSync>(model.config(), model.weights(), *groups_);
  std::function<bool(const std::string&)> keeps;
  if (opt_.zero1) {
    sharding_ = std::make_unique<OptimizerSharding>(model.config(), model.weights(), *groups_);
    keeps = [this](const std::string& name) { return sharding_->owns(name); };
  }
  adamw_ = std::make_unique<AdamW>(model.config(), model.weights(), adamw_config(cfg_), keeps);
  if (!root()) return;
  std::error_code ec;
  std::filesystem::create_directories(opt_.run_dir, ec);
  MYRIAD_REQUIRE(!ec && ::access(opt_.run_dir.c_str(), W_OK) == 0, kIo, "cannot write to the run directory ",
                 opt_.run_dir, ec ? ": " + ec.message() : "");
}

namespace {

// Copies a checkpoint's weights into the model's (checksums first, then the config check: one error for a
// corrupt checkpoint or one of another config); returns the checkpoint directory.
std::string load_checkpoint_weights(const std::string& dir, Transformer& model) {
  const std::string ck = latest_checkpoint(dir);
  verify_directory_checksums(ck);  // every file of the checkpoint, before any is read
  Checkpoint weights = Checkpoint::open(ck);
  validate_checkpoint_against_config(weights, model.config());  // a checkpoint from another config: one error
  for (const auto& [name, v] : model.weights().all()) {
    Tensor dst = v.value();
    dst.copy_from(weights.tensor(name));
  }
  return ck;
}

}  // namespace

void Trainer::init_from(const std::string& dir) {
  const std::string ck = load_checkpoint_weights(dir, model_);
  log({{"type", "init"}, {"step", 0}, {"checkpoint", ck}});  // step 0: the run's start (every record has a step)
  if (root()) std::fprintf(stderr, "myriad train: weights from %s\n", ck.c_str());
}

void Trainer::resume(const std::string& dir) {
  const std::string ck = load_checkpoint_weights(dir, model_);
  adamw_->load(ck);
  const std::string state_path = ck + "/trainer_state.json";
  const nlohmann::json st = read_trainer_state(ck);
  step_ = trainer_state_counter(st, "step", state_path);
  skipped_total_ = trainer_state_counter(st, "skipped_total", state_path);
  consecutive_skips_ = trainer_state_counter(st, "consecutive_skips", state_path);
  tokens_seen_ = trainer_state_counter(st, "tokens_seen", state_path);
  MYRIAD_REQUIRE(st.contains("data"), kFormat, state_path, ": \"data\" (the data loader's position) is missing");
  data_.restore(st["data"]);
  last_checkpoint_ = ck;
  if (root())
    std::fprintf(stderr, "myriad train: resumed from %s at step %lld\n", ck.c_str(), static_cast<long long>(step_));
}

void Trainer::log(const nlohmann::json& record) {
  if (!root()) return;
  std::ofstream out(opt_.run_dir + "/metrics.jsonl", std::ios::app);
  // Generated samples may hold partial UTF-8 (a byte-fallback token cut mid-character): replace, never throw.
  out << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

void Trainer::log_memory_profile(double resident_peak_bytes) {
  memory_profile::stop();
  const memory_profile::Report r = memory_profile::report();
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& e : r.at_peak) parts.push_back({{"phase", e.phase}, {"part", e.part}, {"bytes", e.bytes}});
  log({{"type", "memory_profile"},
       {"step", step_},
       {"rank", groups_->rank},
       {"tensor_peak_bytes", r.peak_bytes},
       {"allocations", r.allocations},
       {"resident_peak_bytes", resident_peak_bytes},
       {"at_peak", parts}});
  if (!root()) return;
  std::fprintf(stderr,
               "\nmyriad train: memory profile of step %lld: tensors allocated in the step peaked at %.3f GB (%zu "
               "allocations; resident peak %.3f GB, which also holds the weights, optimizer state and "
               "non-tensor memory)\n  %-10s %-18s %10s %6s\n",
               static_cast<long long>(step_), double(r.peak_bytes) / 1e9, r.allocations, resident_peak_bytes / 1e9,
               "phase", "part", "GB", "share");
  for (const auto& e : r.at_peak)
    std::fprintf(stderr, "  %-10s %-18s %10.3f %5.1f%%\n", e.phase.c_str(), e.part.c_str(), double(e.bytes) / 1e9,
                 100.0 * double(e.bytes) / double(std::max<size_t>(r.peak_bytes, 1)));
}

std::string Trainer::save(int64_t step) {
  nlohmann::json st = {{"step", step},
                       {"stage", cfg_.stage_of(std::max<int64_t>(step - 1, 0))},
                       {"skipped_total", skipped_total_},
                       {"consecutive_skips", consecutive_skips_},
                       {"tokens_seen", tokens_seen_},
                       {"data", data_.state()},
                       {"train_config", train_config_to_json(cfg_)}};
  NamedTensors weights;
  for (const auto& [n, v] : model_.weights().all()) weights.emplace_back(n, v.value());
  const int ep = groups_->dims.ep;
  if (ep == 1 && !sharding_) {  // every rank holds everything: the root writes the single-file checkpoint
    if (!root()) return last_checkpoint_;
    CheckpointContents c{opt_.model_config_json, weights, adamw_->state_tensors(),
                         adamw_->steps(),        st,      opt_.tokenizer_dir};
    last_checkpoint_ = save_run_checkpoint(opt_.run_dir, step, c, cfg_.keep_checkpoints);
    return last_checkpoint_;
  }
  // Sharded (expert parallelism, or ZeRO-1): each rank writes what it holds (train/sharded_checkpoint.h).
  CheckpointContents c{opt_.model_config_json, weights, adamw_->state_tensors(),
                       adamw_->steps(),        st,      opt_.tokenizer_dir};
  const std::string dir = save_sharded_run_checkpoint(*groups_, model_.config(), opt_.run_dir, step, c, sharding_.get(),
                                                      cfg_.keep_checkpoints);
  if (root()) last_checkpoint_ = dir;
  return last_checkpoint_;
}

int64_t target_token_bytes(const TrainBatch& b, const Tokenizer& tok) {
  int64_t n = 0;
  const int64_t* t = b.targets.data<int64_t>();
  for (int64_t i = 0; i < b.targets.numel(); ++i)
    if (t[i] >= 0) n += int64_t(tok.token_bytes(int32_t(t[i])).size());
  return n;
}

ForwardResult Trainer::forward(const TrainBatch& b, ForwardOptions fo) {
  if (b.teacher_probs.defined()) {  // distillation: the text model, the loss against the teacher's distributions
    MYRIAD_REQUIRE(!b.patches.defined(), kValue, "training: distillation batches are text only");
    ForwardResult r = model_.forward(b.tokens, Tensor(), fo);
    r.loss = model_.distillation_loss(r.hidden, b.teacher_probs, b.targets);
    return r;
  }
  if (!b.patches.defined()) return model_.forward(b.tokens, b.targets, fo);
  const ModelConfig& c = model_.config();
  MYRIAD_REQUIRE(c.vision_config.has_value(), kValue,
                 "training: a batch has images but the model has no vision "
                 "tower (its config has no vision_config)");
  // A whole sequence's placeholders take every image row (Transformer::forward checks the counts); a shard's take
  // its run of them (none: the shard is text only, and the tower gets no gradient here; the sync gives it zeros).
  const int64_t* ids = b.tokens.contiguous().data<int64_t>();
  const auto placed = int64_t(std::count(ids, ids + b.tokens.numel(), c.media_placeholder_token_id.value_or(-1)));
  if (b.sequence_shard && placed == 0) return model_.forward(b.tokens, b.targets, fo);
  ag::Var features = encode_images(*c.vision_config, model_.weights(), ag::Var(b.patches), b.grids);
  if (b.sequence_shard) {
    MYRIAD_REQUIRE(b.image_row_offset + placed <= features.shape()[0], kShape, "training: a shard's ", placed,
                   " image placeholders after row ", b.image_row_offset, " of the images' ", features.shape()[0]);
    std::vector<int32_t> rows(static_cast<size_t>(placed));
    for (int64_t i = 0; i < placed; ++i) rows[size_t(i)] = int32_t(b.image_row_offset + i);
    features = ag::gather_rows(features, Tensor::from_vector(rows, {placed}));
  }
  fo.image_features = &features;
  return model_.forward(b.tokens, b.targets, fo);
}

nlohmann::json Trainer::evaluate(int64_t seq_len) {
  // Every rank sees the same validation batches. Without expert or sequence parallelism the root alone
  // evaluates (the others go on to the next step's collectives and wait there); with them every rank must run
  // the same forwards (their all-to-alls and gathers), so all do (each its shard under sp) and the root reports.
  const int sp = groups_->dims.sp;
  if (!root() && groups_->dims.ep == 1 && sp == 1) return nlohmann::json::object();
  ag::NoGradGuard no_grad;
  double sums[3] = {0, 0, 0};  // nats, counted targets, target bytes
  ForwardOptions fo;
  fo.kda_chunk = cfg_.kda_chunk;
  std::unique_ptr<SequenceParallelContext> shards;
  if (sp > 1) {
    shards = std::make_unique<SequenceParallelContext>(*groups_->sp_group, model_.config(), seq_len / sp);
    fo.sequence = shards.get();
  }
  for (const TrainBatch& whole : data_.validation(seq_len, cfg_.eval_batches)) {
    const TrainBatch b = sp > 1 ? shard_of(whole, groups_->s, sp, model_.config()) : whole;
    ForwardResult r = forward(b, fo);
    const int64_t n = counted_targets(b);
    sums[0] += double(r.loss.value().data<float>()[0]) * double(n);
    sums[1] += double(n);
    sums[2] += double(data_.target_bytes(b));
  }
  if (sp > 1) groups_->sp_group->all_reduce_f64(sums, 3, ReduceOp::kSum);
  const double nats = sums[0], targets = sums[1], bytes = sums[2];
  nlohmann::json e = {{"type", "eval"}, {"step", step_}};
  if (targets > 0) {
    e["val_loss"] = nats / targets;
    if (bytes > 0) e["val_bpb"] = nats / std::log(2.0) / bytes;
  }
  if (opt_.evaluate_tasks && root() && groups_->dims.ep == 1 && sp == 1) {
    nlohmann::json t = opt_.evaluate_tasks(model_);
    for (const auto& [k, v] : t.items())  // "tasks" (pretraining), "agent" (post-training), ...
      if (k != "samples") e[k] = v;
    if (t.contains("samples"))
      for (const auto& s : t["samples"])
        log({{"type", "sample"},
             {"step", step_},
             {"prompt", s.value("prompt", "")},
             {"text", s.value("got", "")},
             {"want", s.value("want", "")}});
  }
  return e;
}

void Trainer::long_context_eval(int64_t stage) {
  if (!opt_.evaluate_long_context || !root() || groups_->dims.ep != 1 || groups_->dims.sp != 1) return;
  nlohmann::json r;
  try {
    r = opt_.evaluate_long_context(model_);
  } catch (const Error& e) {  // an evaluation that cannot run does not end the training: said once, then go on
    std::fprintf(stderr, "\nmyriad train: long-context eval after stage %lld skipped: %s\n",
                 static_cast<long long>(stage), e.what());
    return;
  }
  r["type"] = "longctx";
  r["step"] = step_;
  r["stage"] = stage;
  r["seq_len"] = cfg_.stages[size_t(stage)].seq_len;
  log(r);
  if (!opt_.quiet)
    std::fprintf(stderr, "\nlong-context eval after stage %lld (step %lld): %s %.1f%% over %zu cells\n",
                 static_cast<long long>(stage), static_cast<long long>(step_), r.value("task", "").c_str(),
                 100 * r.value("accuracy", 0.0), r.value("cells", nlohmann::json::array()).size());
}

void Trainer::balance(const std::vector<RoutingStats>& routing, const std::vector<int64_t>& total_tokens) {
  // docs/design.md §1.6: the bias is estimated on this step's batch (every rank's tokens: dist/routing_sync.h) and
  // applied to the next. Only the selection moves; the mixture weights never see b. (aux_loss balancing acts
  // through the loss, in run(): nothing to do here.) Every rank computes the same new b.
  const ModelConfig& c = model_.config();
  Communicator& data = *groups_->world;  // every rank's tokens
  for (size_t l = 0; l < routing.size(); ++l) {
    const RoutingStats& r = routing[l];
    const std::string name =
        "model.layers." + std::to_string(r.layer) + ".block_sparse_moe.gate.e_score_correction_bias";
    if (!model_.weights().contains(name)) continue;  // greedy top-k: no bias
    Tensor bias = model_.weights().at(name).value();
    float* b = bias.data<float>();
    const int64_t E = c.num_experts;
    if (c.balancing == Balancing::kQuantile) {
      const int64_t m = total_tokens[l];
      if (m * c.num_experts_per_token < E) continue;  // too few copies for a quantile per expert
      const std::vector<float> nb = qb_estimate_bias_across(data, r.scores, b, c.num_experts_per_token, m);
      if (std::getenv("MYRIAD_DEBUG_QB") && root()) {  // on this rank's tokens
        const int64_t ml = r.scores.size(0);
        auto viol = [&](const float* bb) {
          std::vector<int64_t> load(size_t(E), 0);
          std::vector<float> row(static_cast<size_t>(E));
          std::vector<int32_t> idx(size_t(c.num_experts_per_token));
          std::vector<float> val(size_t(c.num_experts_per_token));
          for (int64_t t = 0; t < ml; ++t) {
            for (int64_t e = 0; e < E; ++e) row[size_t(e)] = r.scores.data<float>()[t * E + e] + bb[e];
            ops::topk(Device::kCPU, idx.data(), val.data(), row.data(), 1, E, c.num_experts_per_token);
            for (int32_t i : idx) ++load[size_t(i)];
          }
          const double mean = double(ml * c.num_experts_per_token) / double(E);
          return double(*std::max_element(load.begin(), load.end())) / mean - 1.0;
        };
        std::fprintf(stderr, "qb layer %lld: violation %.2f with b, %.2f with the new b on the same batch\n",
                     (long long)r.layer, viol(b), viol(nb.data()));
      }
      std::copy(nb.begin(), nb.end(), b);
    } else if (c.balancing == Balancing::kSignUpdate) {
      sign_update(std::span<float>(b, size_t(E)), std::span<const int64_t>(r.load), float(c.bias_update_rate));
    }
  }
}

TrainSummary Trainer::run() {
  const ModelConfig& mc = model_.config();
  const ModelAccounting acc = account_model(mc);
  // The MFU denominator, measured in this run: every rank at once (they share the machine's cores here, or
  // each has its own), summed.
  groups_->world->barrier();
  peak_gflops_ = groups_->world->all_reduce_value(measure_fma_peak(0.3).gflops);
  const int64_t total = cfg_.total_steps();
  const int64_t end = opt_.stop_after_step >= 0 ? std::min(total, opt_.stop_after_step) : total;
  TrainSummary sum;
  sum.peak_gflops = peak_gflops_;
  const auto t_start = std::chrono::steady_clock::now();
  const double exchange_at_start = expert_exchange_seconds();
  int64_t stage = step_ < total ? cfg_.stage_of(step_) : -1;
  if (step_ == 0) {
    log({{"type", "stage"}, {"step", 0}, {"stage", 0}, {"seq_len", cfg_.stages[0].seq_len}});
    // The untrained model's scores, so a user sees what training changed.
    nlohmann::json e = evaluate(cfg_.stages[0].seq_len);
    log(e);
    if (!opt_.quiet && root()) {
      std::fprintf(stderr, "before training: %s\n", eval_summary(e).c_str());
    }
  }
  ForwardOptions fo;
  fo.kda_chunk = cfg_.kda_chunk;
  fo.checkpoint_layers = cfg_.gradient_checkpointing;
  const int64_t first_step = step_;
  const double rss_before_steps = resident_bytes().first;
  const bool tty = ::isatty(fileno(stderr));
  double window_tokens = 0, window_time = 0;
  while (step_ < end) {
    const int64_t s = cfg_.stage_of(step_);
    if (s != stage) {
      // Stage boundary: the long-context grid of the stage that ended, a checkpoint, then the new sequence length.
      long_context_eval(stage);
      save(step_);
      stage = s;
      log({{"type", "stage"}, {"step", step_}, {"stage", s}, {"seq_len", cfg_.stages[size_t(s)].seq_len}});
      if (!opt_.quiet && root())
        std::fprintf(stderr, "%smyriad train: stage %lld: sequence length %lld (checkpoint saved)\n", tty ? "\n" : "",
                     static_cast<long long>(s), static_cast<long long>(cfg_.stages[size_t(s)].seq_len));
    }
    const int64_t T = cfg_.stages[size_t(s)].seq_len;
    fo.step = step_;  // the capacity-factor schedule
    const int64_t n_seq = cfg_.sequences_per_step(s);
    const auto t0 = std::chrono::steady_clock::now();
    const double sync_before = sync_->seconds(), exchange_before = expert_exchange_seconds();
    const double overlapped_before = sync_->overlapped_seconds();
    model_.weights().zero_grad();
    if (opt_.memory_profile && step_ == first_step) memory_profile::start();
    double loss_sum = 0, aux_sum = 0;
    bool finite = true;
    std::vector<RoutingStats> routing;
    // This rank's block of the step's sequences; every rank reads them all, in order (the data state is global).
    const int64_t per_rank = n_seq / groups_->dims.data_ranks();
    const int64_t first = groups_->data_rank * per_rank;
    // Sequence parallelism: the sp ranks of a data rank run their shards of each of its sequences side by side.
    const int sp = groups_->dims.sp;
    std::unique_ptr<SequenceParallelContext> shards;
    if (sp > 1) {
      shards = std::make_unique<SequenceParallelContext>(*groups_->sp_group, model_.config(), T / sp);
      fo.sequence = shards.get();
    } else {
      fo.sequence = nullptr;
    }
    // Fault injection (MYRIAD_FAULT_NAN; fault_injection.h), for the fault tests only.
    const auto nan_target = [&](bool norm) -> Tensor {
      for (const auto& [name, v] : model_.weights().all())
        if (v.requires_grad() && (!norm || name.find("norm") != std::string::npos)) return v.value();
      MYRIAD_CHECK(false, "no weight to inject a fault into");
    };
    const float kNan = std::numeric_limits<float>::quiet_NaN();
    float restore_after_step = 0;
    if (fault_.at(NanFault::Kind::kWeight, step_)) nan_target(false).data<float>()[0] = kNan;
    if (fault_.at(NanFault::Kind::kActivation, step_)) {
      float* w = nan_target(true).data<float>();
      restore_after_step = w[0];
      w[0] = kNan;
    }
    data_.set_stage(s);
    for (int64_t i = 0; i < n_seq; ++i) {
      TrainBatch b = data_.next(T);
      if (i < first || i >= first + per_rank) continue;
      if (sp > 1) b = shard_of(b, groups_->s, sp, model_.config());
      // The last backward of the step starts each layer's gradient reduction as soon as that layer is done
      // (not in a step that injects a NaN gradient after the backward: the fault tests' single process anyway).
      const bool overlap = opt_.overlap_grad_sync.value_or(groups_->world->device() == Device::kCUDA) &&
                           groups_->world->size() > 1 && i == first + per_rank - 1 &&
                           !fault_.at(NanFault::Kind::kGradient, step_);
      if (overlap) {
        sync_->begin_overlap();
        fo.gradient_ready = sync_.get();
      }
      ForwardResult r = forward(b, fo);
      const float loss = r.loss.value().data<float>()[0];
      finite = finite && std::isfinite(loss);
      // The step's loss is the mean over its sequences: each backward is seeded with 1 / n_seq, times, for a
      // shard, its share of the sequence's counted targets. Balancing "aux_loss" adds its balance loss to the
      // objective (logged apart: "loss" stays the cross entropy).
      float seed = 1.0f / float(n_seq);
      double share = 1.0;
      if (sp > 1) {
        const int64_t mine = counted_targets(b);
        const int64_t all = groups_->sp_group->all_reduce_value(mine);
        share = all > 0 ? double(mine) / double(all) : 1.0 / sp;
        seed = float(share / double(n_seq));
      }
      loss_sum += double(loss) * share;
      std::vector<std::pair<ag::Var, Tensor>> seeds = {{r.loss, Tensor::full({}, seed)}};
      if (r.aux_loss.defined()) {
        const float aux = r.aux_loss.value().data<float>()[0];
        finite = finite && std::isfinite(aux);
        aux_sum += sp > 1 ? double(aux) / sp : double(aux);
        seeds.emplace_back(r.aux_loss,
                           Tensor::full({}, sp > 1 ? float(1.0 / (double(sp) * double(n_seq))) : 1.0f / float(n_seq)));
      }
      if (overlap) {
        const ag::BackwardProgressScope progress([this] { sync_->progress(); });
        ag::Tape::current().backward(seeds);
        fo.gradient_ready = nullptr;
      } else {
        ag::Tape::current().backward(seeds);
      }
      // Balancing statistics over the whole step: loads summed, router scores of every sequence stacked.
      if (routing.empty()) {
        routing = std::move(r.routing);
      } else {
        for (size_t j = 0; j < routing.size() && j < r.routing.size(); ++j) {
          for (size_t e = 0; e < routing[j].load.size(); ++e) routing[j].load[e] += r.routing[j].load[e];
          routing[j].dropped += r.routing[j].dropped;
          routing[j].copies += r.routing[j].copies;
          const Tensor& a = routing[j].scores;
          const Tensor& b2 = r.routing[j].scores;
          Tensor both = Tensor::empty({a.size(0) + b2.size(0), a.size(1)});
          std::copy(a.data<float>(), a.data<float>() + a.numel(), both.data<float>());
          std::copy(b2.data<float>(), b2.data<float>() + b2.numel(), both.data<float>() + a.numel());
          routing[j].scores = both;
        }
      }
    }
    if (fault_.at(NanFault::Kind::kActivation, step_)) nan_target(true).data<float>()[0] = restore_after_step;
    if (fault_.at(NanFault::Kind::kGradient, step_)) {
      for (const auto& [name, v] : model_.weights().all())
        if (v.has_grad()) {
          v.grad().data<float>()[0] = kNan;
          break;
        }
    }
    // Over the ranks: the gradients (summed: each backward was seeded with 1 / the step's sequences), the
    // losses, the skip decision (every rank skips together) and the routing statistics.
    Communicator& world = *groups_->world;
    // The stage's frozen modules (stages[i].freeze): left out of the norm and the update. Their gradients are
    // still computed (the backward reaches the tower through the projector either way).
    const std::vector<std::string>& freeze = cfg_.stages[size_t(cfg_.stage_of(step_))].freeze;
    AdamW::Frozen frozen;
    if (!freeze.empty())
      frozen = [&freeze](const std::string& name) {
        return std::find(freeze.begin(), freeze.end(), module_of_tensor(name)) != freeze.end();
      };
    double gnorm = 0;
    if (world.size() > 1) {
      sync_->all_reduce();
      gnorm = sync_->grad_norm();
      double sums[2] = {loss_sum, aux_sum};
      world.all_reduce_f64(sums, 2, ReduceOp::kSum);
      loss_sum = sums[0];
      aux_sum = sums[1];
      finite = world.all_reduce_value<int32_t>(finite ? 1 : 0, ReduceOp::kMin) == 1;
    } else {
      gnorm = adamw_->grad_norm(model_.weights(), frozen);
    }
    std::vector<int64_t> routed_tokens(routing.size());
    // Every rank's tokens are distinct tokens of the step (sequences over the data ranks, shards over sp).
    for (size_t j = 0; j < routing.size(); ++j) routed_tokens[j] = all_reduce_routing(world, routing[j]);
    const double lr = cfg_.lr_at(step_);
    finite = finite && std::isfinite(gnorm);
    if (finite) {
      const float clip_scale = cfg_.clip > 0 && gnorm > cfg_.clip ? float(cfg_.clip / gnorm) : 1.0f;
      {
        memory_profile::Part part("optimizer");
        adamw_->step(model_.weights(), float(lr), clip_scale, frozen);
      }
      if (sharding_) sharding_->broadcast_updates();  // ZeRO-1: the owners' new values to every replica
      // a frozen text model keeps its routers' balancing biases too
      if (std::find(freeze.begin(), freeze.end(), "text_model") == freeze.end()) balance(routing, routed_tokens);
      consecutive_skips_ = 0;
    } else {
      ++skipped_total_;
      ++consecutive_skips_;
    }
    ++step_;
    tokens_seen_ += n_seq * T;
    const double dt = seconds_since(t0);
    window_tokens += double(n_seq * T);
    window_time += dt;
    const double tps = double(n_seq * T) / dt;
    const double mfu = training_flops_per_token(mc, acc, T).total() * tps / (peak_gflops_ * 1e9);
    const double loss = loss_sum / double(n_seq);
    nlohmann::json rec = {{"type", "step"},
                          {"step", step_},
                          {"stage", s},
                          {"seq_len", T},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", gnorm},
                          {"tokens", n_seq * T},
                          {"tokens_per_s", tps},
                          {"mfu", mfu},
                          {"skipped", skipped_total_},
                          {"time_s", seconds_since(t_start)}};
    if (mc.balancing == Balancing::kAuxLoss) rec["aux_loss"] = aux_sum / double(n_seq);
    if (world.size() > 1) {
      rec["grad_sync_s"] = sync_->seconds() - sync_before;
      rec["grad_sync_overlapped_s"] = sync_->overlapped_seconds() - overlapped_before;
    }
    if (groups_->dims.ep > 1) rec["expert_exchange_s"] = expert_exchange_seconds() - exchange_before;
    // A skipped step's routing (NaN scores) describes nothing; every rank agrees on `finite`, so all skip the
    // collective summary together.
    if (!routing.empty() && finite) {
      nlohmann::json moe = nlohmann::json::array();
      for (size_t j = 0; j < routing.size(); ++j) {
        const RoutingStats& r = routing[j];
        const RoutingStatsSummary sm =
            summarize_routing_across(world, r, model_.config().num_experts_per_token, routed_tokens[j]);
        moe.push_back({{"layer", r.layer},
                       {"max_violation", sm.max_violation},
                       {"dropped_fraction", sm.dropped_fraction},
                       {"router_entropy", sm.mean_entropy},
                       {"dead_experts", sm.dead_experts},
                       {"load", r.load}});
      }
      rec["moe"] = moe;
    }
    log(rec);
    if (step_ == first_step + 1) {
      // What this rank holds, counted from its tensors (the plan's cross-check: myriad plan --recipe myriad-cpu),
      // and its resident memory before and after the first step (the difference: activations and temporaries).
      double weights = 0, grads = 0;
      for (const auto& [name, v] : model_.weights().all()) {
        weights += double(v.value().numel()) * 4.0;
        if (v.has_grad()) grads += double(v.grad().numel()) * 4.0;
      }
      double optimizer = 0;
      for (const auto& [name, t] : adamw_->state_tensors()) optimizer += double(t.numel()) * 4.0;
      const auto [rss_now, rss_peak] = resident_bytes();
      log({{"type", "memory"},
           {"step", step_},
           {"rank", groups_->rank},
           {"weights_bytes", weights},
           {"gradients_bytes", grads},
           {"optimizer_bytes", optimizer},
           {"resident_before_steps_bytes", rss_before_steps},
           {"resident_peak_bytes", rss_peak}});
      if (opt_.memory_profile) log_memory_profile(rss_peak);
    }
    sum.last_loss = loss;
    if (!finite && consecutive_skips_ >= cfg_.max_consecutive_skips) {
      throw_error(ErrorKind::kValue, "training stopped: ", consecutive_skips_,
                  " consecutive steps had a NaN or infinite loss or gradient (step ", step_,
                  "); the last good "
                  "checkpoint is ",
                  last_checkpoint_.empty() ? std::string("(none yet)") : last_checkpoint_,
                  ". Lower the learning rate or check the data.");
    }
    if (!opt_.quiet && root() && (step_ % cfg_.log_every == 0 || step_ == end)) {
      const double avg_tps = window_tokens / std::max(window_time, 1e-9);
      double remaining_tokens = 0;
      for (int64_t k = step_; k < end; ++k)
        remaining_tokens +=
            double(cfg_.sequences_per_step(cfg_.stage_of(k)) * cfg_.stages[size_t(cfg_.stage_of(k))].seq_len);
      std::fprintf(stderr,
                   "%sstage %lld (T=%lld) step %lld/%lld  loss %.4f  %.0f tok/s  MFU %.1f%%  lr %.2e  gnorm %.3f  "
                   "skipped %lld  ETA %s%s",
                   tty ? "\r" : "", static_cast<long long>(s), static_cast<long long>(T), static_cast<long long>(step_),
                   static_cast<long long>(end), loss, avg_tps, 100.0 * mfu, lr, gnorm,
                   static_cast<long long>(skipped_total_),
                   format_eta(remaining_tokens / std::max(avg_tps, 1e-9)).c_str(), tty ? "   " : "\n");
      std::fflush(stderr);
    }
    if (step_ % cfg_.eval_every == 0 || step_ == end) {
      nlohmann::json e = evaluate(T);
      log(e);
      sum.last_val_loss = e.value("val_loss", 0.0);
      sum.last_val_bpb = e.value("val_bpb", 0.0);
      if (!opt_.quiet && root()) {
        std::fprintf(stderr, "%seval at step %lld: %s\n", tty ? "\n" : "", static_cast<long long>(step_),
                     eval_summary(e).c_str());
      }
    }
    // Never during a run of skipped steps: a non-finite weight (corrupted memory) would make a bad checkpoint the
    // one to resume from; the last good one stays `latest`.
    if ((step_ % cfg_.checkpoint_every == 0 || step_ == end) && consecutive_skips_ == 0) save(step_);
  }
  if (tty && !opt_.quiet && root()) std::fprintf(stderr, "\n");
  if (step_ == cfg_.total_steps() && stage >= 0 && step_ > first_step) long_context_eval(stage);  // the last stage
  sum.steps = step_;
  sum.skipped = skipped_total_;
  sum.tokens_per_s = window_tokens / std::max(window_time, 1e-9);
  sum.mfu =
      training_flops_per_token(mc, acc, cfg_.stages[size_t(cfg_.stage_of(std::max<int64_t>(step_ - 1, 0)))].seq_len)
          .total() *
      sum.tokens_per_s / (peak_gflops_ * 1e9);
  sum.last_checkpoint = last_checkpoint_;
  sum.root = root();
  sum.grad_sync_s = sync_->seconds();
  sum.grad_sync_overlapped_s = sync_->overlapped_seconds();
  sum.expert_exchange_s = expert_exchange_seconds() - exchange_at_start;
  sum.train_time_s = window_time;
  return sum;
}

}  // namespace myriad
