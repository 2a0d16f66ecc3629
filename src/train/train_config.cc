#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/datasets/tasks.h"
#include "model/config.h"

namespace myriad {

const char* module_of_tensor(const std::string& name) {
  if (name.rfind("vision_tower.", 0) == 0) return "vision_tower";
  if (name.rfind("mm_projector.", 0) == 0) return "mm_projector";
  return "text_model";
}

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

TrainConfig parse_train_config(const nlohmann::json& j, const std::string& source, const ModelConfig& model) {
  // myriad's own format: an unknown field is a typo, so it is an error (the model config, a foreign format,
  // warns instead); types, integers and messages follow the same reader (core/json_fields.h).
  static const std::set<std::string> kIgnored = {"comment"};
  const JsonSource src{source, UnknownFields::kError, &kIgnored, nullptr};
  MYRIAD_REQUIRE(j.is_object(), kConfig, source, ": the training config must be a JSON object (got ", j.type_name(),
                 ")");
  JsonFields o(j, "", src);
  TrainConfig c;
  const nlohmann::json* stages = o.opt_array("stages");
  if (!stages || stages->empty())
    o.fail("stages", stages ? *stages : nlohmann::json(), "must be a non-empty list of {seq_len, steps, lr_scale}");
  std::vector<std::optional<double>> stage_fraction;  // stages[i].longctx_fraction, resolved with longctx_mix
  for (size_t i = 0; i < stages->size(); ++i) {
    JsonFields so((*stages)[i], str("stages[", i, "]"), src);
    Stage st;
    stage_fraction.push_back(so.opt_double("longctx_fraction"));
    if (stage_fraction.back() && !(*stage_fraction.back() >= 0 && *stage_fraction.back() <= 1))
      so.fail("longctx_fraction", *stage_fraction.back(), "must lie in [0, 1]");
    st.seq_len = so.req_int("seq_len");
    st.steps = so.req_int("steps");
    st.lr_scale = so.double_or("lr_scale", 1.0);
    if (st.seq_len < 2) so.fail("seq_len", st.seq_len, "must be at least 2");
    if (st.seq_len > model.max_position_embeddings)
      so.fail("seq_len", st.seq_len,
              str("longer than the model's max_position_embeddings (", model.max_position_embeddings, ")"));
    if (st.steps < 1) so.fail("steps", st.steps, "must be at least 1");
    if (!(st.lr_scale > 0) || !std::isfinite(st.lr_scale)) so.fail("lr_scale", st.lr_scale, "must be > 0");
    if (const nlohmann::json* fr = so.opt_array("freeze")) {
      std::vector<std::string> modules = {"text_model"};
      if (model.vision_config) modules.insert(modules.end(), {"vision_tower", "mm_projector"});
      for (const nlohmann::json& m : *fr) {
        const std::string name = m.is_string() ? m.get<std::string>() : m.dump();
        if (std::find(modules.begin(), modules.end(), name) == modules.end())
          so.fail("freeze", *fr,
                  str(
                      "'", name, "' is not a module of this model (",
                      modules.size() == 1 ? "it has no vision tower; " : "", "modules: ",
                      [&] {
                        std::string l;
                        for (const auto& x : modules) l += (l.empty() ? "" : ", ") + x;
                        return l;
                      }(),
                      ")"));
        if (std::find(st.freeze.begin(), st.freeze.end(), name) == st.freeze.end()) st.freeze.push_back(name);
      }
      if (st.freeze.size() == modules.size()) so.fail("freeze", *fr, "freezes every module: nothing would train");
    }
    so.finish();
    c.stages.push_back(st);
  }
  c.batch_tokens = o.int_or("batch_tokens", c.batch_tokens);
  c.lr = o.double_or("lr", c.lr);
  c.min_lr_ratio = o.double_or("min_lr_ratio", c.min_lr_ratio);
  c.warmup_steps = o.int_or("warmup_steps", c.warmup_steps);
  c.weight_decay = o.double_or("weight_decay", c.weight_decay);
  c.beta1 = o.double_or("beta1", c.beta1);
  c.beta2 = o.double_or("beta2", c.beta2);
  c.eps = o.double_or("eps", c.eps);
  c.clip = o.double_or("clip", c.clip);
  c.seed = o.uint_or("seed", c.seed);
  c.gradient_checkpointing = o.bool_or("gradient_checkpointing", c.gradient_checkpointing);
  c.eval_every = o.int_or("eval_every", c.eval_every);
  c.eval_batches = o.int_or("eval_batches", c.eval_batches);
  c.task_eval_per_task = o.int_or("task_eval_per_task", c.task_eval_per_task);
  c.task_eval_max_new_tokens = o.int_or("task_eval_max_new_tokens", c.task_eval_max_new_tokens);
  c.checkpoint_every = o.int_or("checkpoint_every", c.checkpoint_every);
  c.keep_checkpoints = o.int_or("keep_checkpoints", c.keep_checkpoints);
  c.max_consecutive_skips = o.int_or("max_consecutive_skips", c.max_consecutive_skips);
  c.log_every = o.int_or("log_every", c.log_every);
  c.kda_chunk = o.int_or("kda_chunk", c.kda_chunk);
  c.image_shift = o.int_or("image_shift", c.image_shift);
  if (const nlohmann::json* lc = o.opt_object("longctx_eval")) {
    JsonFields lo(*lc, "longctx_eval", src);
    LongContextEvalConfig& e = c.longctx_eval;
    e.task = lo.choice_or("task", e.task, {"passkey", "multikey", "vartrack"});
    e.lengths = lo.req_int_list("lengths");
    if (lo.present("depths")) e.depths = lo.req_int_list("depths");
    e.samples = lo.int_or("samples", e.samples);
    lo.finish();
    if (e.lengths.empty()) lo.fail("lengths", *lc->find("lengths"), "must list at least one length");
    for (int64_t L : e.lengths)
      if (L < 1 || L > model.max_position_embeddings)
        lo.fail("lengths", L, str("must lie in [1, max_position_embeddings = ", model.max_position_embeddings, "]"));
    if (e.depths.empty()) lo.fail("depths", *lc->find("depths"), "must list at least one depth");
    for (int64_t d : e.depths)
      if (d < 0 || d > 100) lo.fail("depths", d, "must lie in 0..100 (percent)");
    lo.at_least("samples", e.samples, 1);
  }
  if (const nlohmann::json* lm = o.opt_object("longctx_mix")) {
    JsonFields mo(*lm, "longctx_mix", src);
    LongTaskMixConfig& m = c.longctx_mix;
    if (const nlohmann::json* tasks = mo.opt_array("tasks")) {
      m.tasks.clear();
      for (const nlohmann::json& t : *tasks) {
        if (!t.is_string() || (t != "passkey" && t != "multikey" && t != "vartrack"))
          mo.fail("tasks", t, "must list task names of \"passkey\", \"multikey\", \"vartrack\"");
        m.tasks.push_back(t.get<std::string>());
      }
      if (m.tasks.empty()) mo.fail("tasks", *tasks, "must list at least one task");
    }
    m.fraction = mo.req_double("fraction");
    if (!(m.fraction >= 0 && m.fraction <= 1)) mo.fail("fraction", m.fraction, "must lie in [0, 1]");
    if (std::any_of(stage_fraction.begin(), stage_fraction.end(), [](const auto& f) { return f.has_value(); }))
      for (const std::optional<double>& f : stage_fraction) m.stage_fractions.push_back(f.value_or(m.fraction));
    if (!m.enabled())
      mo.fail("fraction", m.fraction, "is 0 and no stage's longctx_fraction is above 0: no sample would be mixed in");
    mo.finish();
  } else {
    for (size_t i = 0; i < stage_fraction.size(); ++i)
      if (stage_fraction[i])
        JsonFields((*stages)[i], str("stages[", i, "]"), src)
            .fail("longctx_fraction", *stage_fraction[i], "needs longctx_mix (the tasks to mix in)");
  }
  if (const nlohmann::json* bc = o.opt_object("builtin_corpus")) {
    JsonFields co(*bc, "builtin_corpus", src);
    const int64_t bytes = co.int_or("bytes", int64_t(c.builtin_corpus_bytes));
    if (bytes < 1024 || bytes > (int64_t(1) << 34)) co.fail("bytes", bytes, "must lie in [1024, 2^34]");
    c.builtin_corpus_bytes = size_t(bytes);
    c.builtin_corpus.task_share = co.double_or("task_share", c.builtin_corpus.task_share);
    if (!(c.builtin_corpus.task_share >= 0 && c.builtin_corpus.task_share <= 1))
      co.fail("task_share", c.builtin_corpus.task_share, "must lie in [0, 1]");
    if (const nlohmann::json* tw = co.opt_object("task_weights")) {
      JsonFields wo(*tw, "builtin_corpus.task_weights", src);
      double sum = 0;
      for (size_t k = 0; k < std::size(kTaskKinds); ++k) {
        double& w = c.builtin_corpus.task_weights[k];
        w = wo.double_or(task_kind_name(kTaskKinds[k]), w);
        if (!(w >= 0 && std::isfinite(w))) wo.fail(task_kind_name(kTaskKinds[k]), w, "must be a number >= 0");
        sum += w;
      }
      wo.finish();
      if (!(sum > 0)) co.fail("task_weights", *tw, "must give some task kind a weight above 0");
    }
    co.finish();
  }
  o.finish();
  o.at_least("batch_tokens", c.batch_tokens, 1);
  if (!(c.lr > 0) || !std::isfinite(c.lr)) o.fail("lr", c.lr, "must be a positive number");
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1)) o.fail("min_lr_ratio", c.min_lr_ratio, "must lie in [0, 1]");
  if (c.warmup_steps < 0) o.fail("warmup_steps", c.warmup_steps, "must be >= 0");
  if (!(c.weight_decay >= 0)) o.fail("weight_decay", c.weight_decay, "must be >= 0");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) o.fail("beta1", c.beta1, "must lie in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) o.fail("beta2", c.beta2, "must lie in [0, 1)");
  if (!(c.eps >= 0)) o.fail("eps", c.eps, "must be >= 0");
  if (!(c.clip >= 0)) o.fail("clip", c.clip, "must be >= 0 (0 = off)");
  const std::pair<const char*, int64_t> at_least_one[] = {{"checkpoint_every", c.checkpoint_every},
                                                          {"keep_checkpoints", c.keep_checkpoints},
                                                          {"max_consecutive_skips", c.max_consecutive_skips},
                                                          {"log_every", c.log_every},
                                                          {"eval_every", c.eval_every},
                                                          {"kda_chunk", c.kda_chunk}};
  for (const auto& [key, v] : at_least_one) o.at_least(key, v, 1);
  if (c.eval_batches < 0) o.fail("eval_batches", c.eval_batches, "must be >= 0");
  if (c.image_shift < 0 || c.image_shift > 64) o.fail("image_shift", c.image_shift, "must lie in 0..64 (pixels)");
  if (c.task_eval_per_task < 0) o.fail("task_eval_per_task", c.task_eval_per_task, "must be >= 0");
  o.at_least("task_eval_max_new_tokens", c.task_eval_max_new_tokens, 1);
  return c;
}

TrainConfig load_train_config(const std::string& path, const ModelConfig& model) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot read training config ", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MYRIAD_REQUIRE(!in.bad(), kIo, "cannot read training config ", path);
  return parse_train_config(parse_json_document(text, path, ErrorKind::kConfig), path, model);
}

nlohmann::json train_config_to_json(const TrainConfig& c) {
  nlohmann::json j;
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const Stage& s = c.stages[i];
    nlohmann::json st = {{"seq_len", s.seq_len}, {"steps", s.steps}, {"lr_scale", s.lr_scale}};
    if (!s.freeze.empty()) st["freeze"] = s.freeze;
    if (i < c.longctx_mix.stage_fractions.size()) st["longctx_fraction"] = c.longctx_mix.stage_fractions[i];
    j["stages"].push_back(std::move(st));
  }
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
  if (c.image_shift) j["image_shift"] = c.image_shift;
  if (c.longctx_eval.enabled())
    j["longctx_eval"] = {{"task", c.longctx_eval.task},
                         {"lengths", c.longctx_eval.lengths},
                         {"depths", c.longctx_eval.depths},
                         {"samples", c.longctx_eval.samples}};
  if (c.longctx_mix.enabled())
    j["longctx_mix"] = {{"tasks", c.longctx_mix.tasks}, {"fraction", c.longctx_mix.fraction}};
  const CorpusMix default_mix;
  if (c.builtin_corpus_bytes != TrainConfig().builtin_corpus_bytes ||
      c.builtin_corpus.task_share != default_mix.task_share ||
      c.builtin_corpus.task_weights != default_mix.task_weights) {
    nlohmann::json w;
    for (size_t k = 0; k < std::size(kTaskKinds); ++k)
      w[task_kind_name(kTaskKinds[k])] = c.builtin_corpus.task_weights[k];
    j["builtin_corpus"] = {
        {"bytes", c.builtin_corpus_bytes}, {"task_share", c.builtin_corpus.task_share}, {"task_weights", w}};
  }
  return j;
}

}  // namespace myriad
