#include "train/train_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "core/error.h"
#include "model/config.h"

namespace myriad {

int64_t TrainConfig::total_steps() const {
  int64_t n = 0;
  for (const Stage& s : stages) n += s.steps;
  return n;
}

int64_t TrainConfig::stage_of(int64_t step) const {
  int64_t end = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    end += stages[i].steps;
    if (step < end) return int64_t(i);
  }
  return int64_t(stages.size()) - 1;
}

double TrainConfig::lr_at(int64_t step) const {
  const double scale = stages[size_t(stage_of(step))].lr_scale;
  if (step < warmup_steps) return lr * scale * double(step + 1) / double(warmup_steps);
  const int64_t total = total_steps();
  const double progress = total > warmup_steps ? double(step - warmup_steps) / double(total - warmup_steps) : 1.0;
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(1.0, progress)));
  return lr * scale * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine);
}

int64_t TrainConfig::sequences_per_step(int64_t stage) const {
  return std::max<int64_t>(1, batch_tokens / stages[size_t(stage)].seq_len);
}

namespace {

template <class T>
T get(const nlohmann::json& j, const char* key, T fallback, const std::string& source) {
  if (!j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const std::exception&) {
    throw_error(ErrorKind::kConfig, source, ": ", key, " = ", j.at(key).dump(), ": wrong type");
  }
}

}  // namespace

TrainConfig parse_train_config(const nlohmann::json& j, const std::string& source, const ModelConfig& model) {
  MYRIAD_REQUIRE(j.is_object(), kConfig, source, ": the training config must be a JSON object");
  static const char* kKnown[] = {"stages",
                                 "batch_tokens",
                                 "lr",
                                 "min_lr_ratio",
                                 "warmup_steps",
                                 "weight_decay",
                                 "beta1",
                                 "beta2",
                                 "eps",
                                 "clip",
                                 "seed",
                                 "gradient_checkpointing",
                                 "eval_every",
                                 "eval_batches",
                                 "task_eval_per_task",
                                 "task_eval_max_new_tokens",
                                 "checkpoint_every",
                                 "keep_checkpoints",
                                 "max_consecutive_skips",
                                 "log_every",
                                 "kda_chunk",
                                 "comment"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    MYRIAD_REQUIRE(known, kConfig, source, ": unknown field ", key, " (see src/train/train_config.h)");
  }
  TrainConfig c;
  MYRIAD_REQUIRE(j.contains("stages") && j["stages"].is_array() && !j["stages"].empty(), kConfig, source,
                 ": stages must be a non-empty list of {seq_len, steps}");
  for (size_t i = 0; i < j["stages"].size(); ++i) {
    const auto& s = j["stages"][i];
    const std::string where = source + ": stages[" + std::to_string(i) + "]";
    Stage st;
    st.seq_len = get<int64_t>(s, "seq_len", 0, where);
    st.steps = get<int64_t>(s, "steps", 0, where);
    st.lr_scale = get<double>(s, "lr_scale", 1.0, where);
    MYRIAD_REQUIRE(st.seq_len >= 2, kConfig, where, ".seq_len = ", st.seq_len, ": must be at least 2");
    MYRIAD_REQUIRE(st.seq_len <= model.max_position_embeddings, kConfig, where, ".seq_len = ", st.seq_len,
                   ": longer than the model's max_position_embeddings (", model.max_position_embeddings, ")");
    MYRIAD_REQUIRE(st.steps >= 1, kConfig, where, ".steps = ", st.steps, ": must be at least 1");
    MYRIAD_REQUIRE(st.lr_scale > 0, kConfig, where, ".lr_scale = ", st.lr_scale, ": must be > 0");
    c.stages.push_back(st);
  }
  c.batch_tokens = get<int64_t>(j, "batch_tokens", c.batch_tokens, source);
  c.lr = get<double>(j, "lr", c.lr, source);
  c.min_lr_ratio = get<double>(j, "min_lr_ratio", c.min_lr_ratio, source);
  c.warmup_steps = get<int64_t>(j, "warmup_steps", c.warmup_steps, source);
  c.weight_decay = get<double>(j, "weight_decay", c.weight_decay, source);
  c.beta1 = get<double>(j, "beta1", c.beta1, source);
  c.beta2 = get<double>(j, "beta2", c.beta2, source);
  c.eps = get<double>(j, "eps", c.eps, source);
  c.clip = get<double>(j, "clip", c.clip, source);
  c.seed = get<uint64_t>(j, "seed", c.seed, source);
  c.gradient_checkpointing = get<bool>(j, "gradient_checkpointing", c.gradient_checkpointing, source);
  c.eval_every = get<int64_t>(j, "eval_every", c.eval_every, source);
  c.eval_batches = get<int64_t>(j, "eval_batches", c.eval_batches, source);
  c.task_eval_per_task = get<int64_t>(j, "task_eval_per_task", c.task_eval_per_task, source);
  c.task_eval_max_new_tokens = get<int64_t>(j, "task_eval_max_new_tokens", c.task_eval_max_new_tokens, source);
  c.checkpoint_every = get<int64_t>(j, "checkpoint_every", c.checkpoint_every, source);
  c.keep_checkpoints = get<int64_t>(j, "keep_checkpoints", c.keep_checkpoints, source);
  c.max_consecutive_skips = get<int64_t>(j, "max_consecutive_skips", c.max_consecutive_skips, source);
  c.log_every = get<int64_t>(j, "log_every", c.log_every, source);
  c.kda_chunk = get<int64_t>(j, "kda_chunk", c.kda_chunk, source);
  MYRIAD_REQUIRE(c.batch_tokens >= 1, kConfig, source, ": batch_tokens = ", c.batch_tokens, ": must be >= 1");
  MYRIAD_REQUIRE(c.lr > 0 && std::isfinite(c.lr), kConfig, source, ": lr = ", c.lr, ": must be a positive number");
  MYRIAD_REQUIRE(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1, kConfig, source, ": min_lr_ratio = ", c.min_lr_ratio,
                 ": must lie in [0, 1]");
  MYRIAD_REQUIRE(c.warmup_steps >= 0, kConfig, source, ": warmup_steps = ", c.warmup_steps, ": must be >= 0");
  MYRIAD_REQUIRE(c.weight_decay >= 0, kConfig, source, ": weight_decay = ", c.weight_decay, ": must be >= 0");
  MYRIAD_REQUIRE(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, kConfig, source,
                 ": beta1 and beta2 must lie in [0, 1)");
  MYRIAD_REQUIRE(c.clip >= 0, kConfig, source, ": clip = ", c.clip, ": must be >= 0 (0 = off)");
  MYRIAD_REQUIRE(c.checkpoint_every >= 1 && c.keep_checkpoints >= 1 && c.max_consecutive_skips >= 1 &&
                     c.log_every >= 1 && c.eval_every >= 1 && c.kda_chunk >= 1,
                 kConfig, source,
                 ": checkpoint_every, keep_checkpoints, max_consecutive_skips, log_every, eval_every and kda_chunk "
                 "must be >= 1");
  return c;
}

TrainConfig load_train_config(const std::string& path, const ModelConfig& model) {
  std::ifstream in(path);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot read training config ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw_error(ErrorKind::kConfig, path, ": not valid JSON: ", e.what());
  }
  return parse_train_config(j, path, model);
}

nlohmann::json train_config_to_json(const TrainConfig& c) {
  nlohmann::json j;
  for (const Stage& s : c.stages)
    j["stages"].push_back({{"seq_len", s.seq_len}, {"steps", s.steps}, {"lr_scale", s.lr_scale}});
  j["batch_tokens"] = c.batch_tokens;
  j["lr"] = c.lr;
  j["min_lr_ratio"] = c.min_lr_ratio;
  j["warmup_steps"] = c.warmup_steps;
  j["weight_decay"] = c.weight_decay;
  j["beta1"] = c.beta1;
  j["beta2"] = c.beta2;
  j["eps"] = c.eps;
  j["clip"] = c.clip;
  j["seed"] = c.seed;
  j["gradient_checkpointing"] = c.gradient_checkpointing;
  j["eval_every"] = c.eval_every;
  j["eval_batches"] = c.eval_batches;
  j["task_eval_per_task"] = c.task_eval_per_task;
  j["task_eval_max_new_tokens"] = c.task_eval_max_new_tokens;
  j["checkpoint_every"] = c.checkpoint_every;
  j["keep_checkpoints"] = c.keep_checkpoints;
  j["max_consecutive_skips"] = c.max_consecutive_skips;
  j["log_every"] = c.log_every;
  j["kda_chunk"] = c.kda_chunk;
  return j;
}

}  // namespace myriad
