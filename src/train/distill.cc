#include "train/distill.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/json_fields.h"
#include "infer/generate.h"
#include "io/atomic_file.h"
#include "io/run_layout.h"
#include "model/accounting.h"
#include "train/training_ranks.h"

namespace myriad {

namespace fs = std::filesystem;

DistillSource::DistillSource(std::shared_ptr<const InferenceModel> teacher, const std::string& data_dir, uint64_t seed,
                             double generated_share, float temperature)
    : teacher_(std::move(teacher)),
      loader_(data_dir, seed),
      seed_(seed),
      share_(generated_share),
      temperature_(temperature) {
  MYRIAD_REQUIRE(share_ >= 0 && share_ <= 1, kValue, "distill: the generated share (", share_, ") must lie in [0, 1]");
  MYRIAD_REQUIRE(std::isfinite(temperature_) && temperature_ > 0, kValue, "distill: the temperature (", temperature_,
                 ") must be > 0");
  MYRIAD_REQUIRE(loader_.vocab_size() == 0 || loader_.vocab_size() <= teacher_->vocab_size(), kValue,
                 "distill: ", data_dir, " holds token ids up to ", loader_.vocab_size(),
                 ", past the teacher's vocabulary of ", teacher_->vocab_size());
}

TrainBatch DistillSource::labelled(const std::vector<int64_t>& ids) const {
  const auto T = int64_t(ids.size()) - 1;
  std::vector<int32_t> in(ids.begin(), ids.end() - 1);
  SequenceState s = teacher_->new_sequence();
  const BatchEntry e{&s, in};
  Tensor logits = teacher_->forward(std::span<const BatchEntry>(&e, 1), /*all_logits=*/true);  // [T, V]
  const int64_t V = logits.size(1);
  const int64_t text = teacher_->text_vocab_size();  // padded ids get no mass
  float* x = logits.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    float* row = x + t * V;
    const float m = *std::max_element(row, row + text);
    double sum = 0;
    for (int64_t v = 0; v < text; ++v) sum += row[v] = std::exp((row[v] - m) / temperature_);
    for (int64_t v = 0; v < text; ++v) row[v] = float(double(row[v]) / sum);
    std::fill(row + text, row + V, 0.0f);
  }
  TrainBatch b;
  b.tokens = Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end() - 1), {T});
  b.targets = Tensor::from_vector(std::vector<int64_t>(ids.begin() + 1, ids.end()), {T});
  b.teacher_probs = logits;
  return b;
}

TrainBatch DistillSource::next(int64_t seq_len) {
  const Batch w = loader_.next_batch(seq_len, 1);
  std::vector<int64_t> ids(w.tokens.begin(), w.tokens.end());
  ids.push_back(w.targets.back());
  // Every 1/share-th sequence (spread evenly, resumable from the count): the first half as a prompt, the rest the
  // teacher's own continuation.
  const int64_t n = count_++;
  if (share_ > 0 && std::floor(double(n + 1) * share_) > std::floor(double(n) * share_)) {
    const int64_t keep = std::max<int64_t>(1, seq_len / 2);
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + keep);
    SamplingParams sp;
    sp.temperature = temperature_;
    sp.seed = seed_ * 1000003 + uint64_t(n);
    const std::vector<int32_t> gen = generate(*teacher_, prompt, int(seq_len + 1 - keep), sp, -1);
    std::copy(gen.begin(), gen.end(), ids.begin() + keep);  // (all of it unless the context was full)
    ++generated_;
  }
  return labelled(ids);
}

nlohmann::json DistillSource::state() const {
  return {{"loader", loader_.state()}, {"count", count_}, {"generated", generated_}};
}

void DistillSource::restore(const nlohmann::json& state) {
  MYRIAD_REQUIRE(state.is_object() && state.contains("loader") && state.value("count", -1) >= 0, kFormat,
                 "distill: a data state needs \"loader\" and a non-negative \"count\"");
  loader_.restore(state["loader"]);
  count_ = state["count"].get<int64_t>();
  generated_ = state.value("generated", int64_t(0));
}

std::vector<TrainBatch> DistillSource::validation(int64_t seq_len, int64_t max_batches) {
  std::vector<TrainBatch> out;
  const ValBatches vb = loader_.val_batches(seq_len, 1);
  for (int64_t i = 0; i < std::min<int64_t>(vb.size(), max_batches); ++i) {
    const Batch b = vb[i];
    std::vector<int64_t> ids(b.tokens.begin(), b.tokens.end());
    ids.push_back(b.targets.back());
    out.push_back(labelled(ids));
  }
  return out;
}

int64_t DistillSource::target_bytes(const TrainBatch& b) const {
  return teacher_->tokenizer().loaded() ? target_token_bytes(b, teacher_->tokenizer()) : 0;
}

namespace {

nlohmann::json default_distill_train_config(int64_t max_position_embeddings) {
  return {{"stages", {{{"seq_len", std::min<int64_t>(256, max_position_embeddings)}, {"steps", 300}}}},
          {"batch_tokens", 4096},
          {"lr", 0.002},
          {"warmup_steps", 20},
          {"min_lr_ratio", 0.1},
          {"weight_decay", 0.05},
          {"eval_every", 100},
          {"eval_batches", 8},
          {"checkpoint_every", 100},
          {"keep_checkpoints", 2},
          {"log_every", 10}};
}

}  // namespace

TrainSummary run_distill(const DistillRequest& req) {
  const bool resuming = !req.resume.empty();
  const std::string out = resuming ? req.resume : req.out_dir;
  MYRIAD_REQUIRE(!out.empty(), kValue, "distill needs --out DIR (or --resume DIR)");
  nlohmann::json meta;
  if (resuming) {
    MYRIAD_REQUIRE(fs::exists(out + "/distill.json"), kIo, out, " is not a distill run (no distill.json)");
    meta = parse_json_document(read_file(out + "/distill.json"), out + "/distill.json", ErrorKind::kFormat);
  } else {
    MYRIAD_REQUIRE(!req.teacher.empty() && !req.draft_config.empty(), kValue,
                   "distill needs --teacher DIR (a model or run) and --config FILE (the draft's config.json)");
    std::string data = req.data;
    if (data.empty()) {
      data = req.teacher + "/data";
      MYRIAD_REQUIRE(fs::exists(data + "/meta.json"), kValue, "distill: no --data given and the teacher ", req.teacher,
                     " is not a training run with prepared shards in data/ (give --data DIR: `myriad data prepare`)");
    }
    meta = {{"teacher", fs::absolute(req.teacher).string()},
            {"data", fs::absolute(data).string()},
            {"generated_share", req.generated_share},
            {"temperature", req.temperature}};
  }
  const JsonSource meta_src{out + "/distill.json", UnknownFields::kWarn, nullptr, nullptr};
  JsonFields fields(meta, "", meta_src);
  const std::string teacher_dir = fields.string_or("teacher", "");
  const std::string data_dir = fields.string_or("data", "");
  const double share = fields.double_or("generated_share", 0.125);
  const auto temperature = float(fields.double_or("temperature", 1.0));

  const std::shared_ptr<const InferenceModel> teacher = InferenceModel::load(teacher_dir);
  MYRIAD_REQUIRE(teacher->tokenizer().loaded(), kValue, "distill: the teacher ", teacher_dir, " has no tokenizer");
  // The draft's config: the one given with the teacher's vocabulary (a draft must share it), or the run's own.
  std::string config_json;
  if (resuming) {
    config_json = read_file(out + "/config.json");
  } else {
    nlohmann::json c = parse_json_document(read_file(req.draft_config), req.draft_config, ErrorKind::kConfig);
    MYRIAD_REQUIRE(c.is_object(), kConfig, req.draft_config, ": a model config is a JSON object");
    c["vocab_size"] = teacher->vocab_size();
    config_json = c.dump(2) + "\n";
  }
  std::vector<std::string> warnings;
  const ModelConfig mc = parse_model_config(nlohmann::json::parse(config_json), out + "/config.json", &warnings);
  MYRIAD_REQUIRE(!mc.vision_config, kConfig, "distill: the draft is a text model (its config has a vision_config)");

  std::string tc_path = req.train_config_path;
  if (tc_path.empty() && resuming) tc_path = out + "/train.json";
  TrainConfig tc = tc_path.empty() ? parse_train_config(default_distill_train_config(mc.max_position_embeddings),
                                                        "the distill default", mc)
                                   : load_train_config(tc_path, mc);
  if (req.seed) tc.seed = *req.seed;
  if (req.steps) {
    MYRIAD_REQUIRE(tc.stages.size() == 1, kConfig, "--steps sets the steps of a one-stage config; this one has ",
                   tc.stages.size(), " stages");
    tc.stages[0].steps = *req.steps;
  }
  const std::unique_ptr<TrainingRanks> ranks = open_training_ranks(ParallelDims{});
  MYRIAD_REQUIRE(!ranks->distributed(), kValue, "distill runs in one process (not under mpirun)");
  start_training_ranks(*ranks, ParallelDims{}, mc, config_json);
  if (!resuming) {
    start_run_directory(out, req.force);
    write_file_atomic(out + "/train.json", train_config_to_json(tc).dump(1));
    write_file_atomic(out + "/config.json", config_json);
    write_file_atomic(out + "/distill.json", meta.dump(1) + "\n");
    teacher->tokenizer().save(out + "/tokenizer");
  }
  Transformer model(mc, ModelWeights::random(mc, tc.seed));
  DistillSource source(teacher, data_dir, tc.seed, share, temperature);
  TrainerOptions to;
  to.run_dir = out;
  to.model_config_json = config_json;
  to.tokenizer_dir = out + "/tokenizer";
  to.stop_after_step = req.stop_after_step;
  to.quiet = req.quiet;
  to.groups = &ranks->groups;
  if (!req.quiet)
    std::fprintf(stderr,
                 "myriad distill: a %s-parameter draft from %s on %s (%.0f%% of the sequences the teacher's own "
                 "generations, temperature %g)\n",
                 str(double(account_model(mc).total_params) / 1e6, "M").c_str(), teacher_dir.c_str(), data_dir.c_str(),
                 100 * share, double(temperature));
  Trainer trainer(model, tc, source, to);
  if (resuming) trainer.resume(out);
  return trainer.run();
}

}  // namespace myriad
