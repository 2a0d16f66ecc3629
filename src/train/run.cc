#include "train/run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/datasets/corpus.h"
#include "data/datasets/image_store.h"
#include "data/datasets/image_text_records.h"
#include "data/datasets/loader.h"
#include "data/datasets/longctx_tasks.h"
#include "data/datasets/prepare.h"
#include "data/tokenize/data_files.h"
#include "data/tokenize/tokenizer.h"
#include "infer/decode_weights.h"
#include "infer/inference_model.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/param_spec.h"
#include "train/image_question_eval.h"
#include "train/image_text_source.h"
#include "train/longctx_eval.h"
#include "train/longctx_mix_source.h"
#include "train/run_checkpoint.h"
#include "train/task_eval.h"
#include "train/training_ranks.h"

namespace fs = std::filesystem;

namespace myriad {

namespace {

// The shard loader behind the trainer's BatchSource.
class LoaderSource final : public BatchSource {
 public:
  LoaderSource(const std::string& dir, uint64_t seed, const Tokenizer& tok) : loader_(dir, seed), tok_(tok) {}
  TrainBatch next(int64_t seq_len) override { return to_batch(loader_.next_batch(seq_len, 1)); }
  nlohmann::json state() const override { return loader_.state(); }
  void restore(const nlohmann::json& s) override { loader_.restore(s); }
  std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) override {
    std::vector<TrainBatch> out;
    ValBatches vb = loader_.val_batches(seq_len, 1);
    for (int64_t i = 0; i < std::min<int64_t>(vb.size(), max_batches); ++i) out.push_back(to_batch(vb[i]));
    return out;
  }
  int64_t target_bytes(const TrainBatch& b) const override { return target_token_bytes(b, tok_); }

 private:
  static TrainBatch to_batch(const Batch& b) {
    return {Tensor::from_vector(b.tokens, {int64_t(b.tokens.size())}),
            Tensor::from_vector(b.targets, {int64_t(b.targets.size())}),
            Tensor(),
            {}};
  }
  Loader loader_;
  const Tokenizer& tok_;
};

TrainConfig default_train_config(const ModelConfig& mc) {
  nlohmann::json j = {{"stages",
                       {{{"seq_len", std::min<int64_t>(256, mc.max_position_embeddings)}, {"steps", 200}},
                        {{"seq_len", std::min<int64_t>(1024, mc.max_position_embeddings)}, {"steps", 40}}}}};
  return parse_train_config(j, "the built-in default ladder", mc);
}

bool is_shard_dir(const std::string& p) {
  return fs::is_directory(p) && fs::exists(fs::path(p) / "meta.json");
}

// Image-text training data (data/datasets/image_text_records.h): one JSONL file whose records have images, or a
// directory `myriad data prepare` made of one (data/datasets/image_store.h).
bool is_image_data(const std::vector<std::string>& data) {
  return data.size() == 1 &&
         ((fs::is_regular_file(data[0]) && is_image_text_file(data[0])) || is_prepared_image_text(data[0]));
}

// The records file of image-text data: the file itself, or a prepared directory's.
std::string image_records_file(const std::string& data) {
  return is_prepared_image_text(data) ? (fs::path(data) / kImageTextRecordsFile).string() : data;
}

// The text of image-text records, one line each, for training a tokenizer on (captions, questions and answers,
// messages).
std::string image_records_text(const std::vector<ImageTextRecord>& records) {
  std::string out;
  auto line = [&](const std::string& s) {
    for (char c : s) out += c == '\n' ? ' ' : c;
    out += '\n';
  };
  for (const ImageTextRecord& r : records) {
    if (!r.text.empty()) line(r.text);
    if (!r.prompt.empty()) line(r.prompt + " " + r.answer);
    for (const ChatMessage& m : r.messages) line(m.content);
  }
  return out;
}

// What the root's setup hands to every rank (through the run directory: the others read it from there).
struct PreparedRun {
  TrainConfig tc;
  std::string config_json;
  std::string data_dir;
  std::string tok_dir;
};

// Checks every input, then makes the run directory: config copies, corpus, tokenizer, shards. A run directory
// made here is removed again if this fails, so bad input leaves nothing behind.
PreparedRun prepare_run(const RunRequest& req, const ModelConfig& mc, Tokenizer& tok) {
  const std::string config_path =
      fs::is_directory(req.model_config_path) ? req.model_config_path + "/config.json" : req.model_config_path;
  const std::string config_json = read_file(config_path);
  const bool resuming = !req.resume.empty();
  // Output directory: new, or the run being resumed.
  const std::string out = req.out_dir;
  MYRIAD_REQUIRE(!out.empty(), kValue, "train needs --out DIR");
  if (!resuming && fs::exists(out) && !fs::is_empty(out) && !req.force)
    throw_error(ErrorKind::kIo, "the output directory ", out, " exists and is not empty (use --resume ", out,
                " to continue it, or --force to start over)");
  // Every input is checked before anything is written: the data paths, the checkpoint to resume (its tensors
  // against this config) and the training config below.
  const bool prepared = req.data.size() == 1 && is_shard_dir(req.data[0]);
  const bool images = is_image_data(req.data);
  std::vector<ImageTextRecord> image_records;
  if (images) {
    require_vision(mc, "--data " + req.data[0] + " (image-text records)");
    image_records = read_image_text_records(image_records_file(req.data[0]), image_marker(mc));
  } else if (!req.data.empty() && !prepared) {
    for (const std::string& p : req.data)
      MYRIAD_REQUIRE(!fs::is_regular_file(p) || !is_image_text_file(p), kValue, "--data ", p,
                     ": image-text records train alone (give that one file as --data)");
    (void)collect_data_files(req.data);
  }
  if (resuming) validate_checkpoint_against_config(Checkpoint::open(latest_checkpoint(req.resume)), mc);
  // --init: the checkpoint's tensors must be this config's, and its token ids need the tokenizer it was trained with.
  std::string tokenizer_dir = req.tokenizer_dir;
  if (!req.init.empty()) {
    MYRIAD_REQUIRE(!resuming, kValue, "train: --init and --resume exclude each other");
    const std::string ck = latest_checkpoint(req.init);
    validate_checkpoint_against_config(Checkpoint::open(ck), mc);
    if (tokenizer_dir.empty()) {
      MYRIAD_REQUIRE(fs::exists(ck + "/tokenizer/tokenizer.model"), kValue, "--init ", ck,
                     " holds no tokenizer/: give the one its weights were trained with (--tokenizer DIR)");
      tokenizer_dir = ck + "/tokenizer";
    }
  }
  // Training config.
  TrainConfig tc;
  // Precedence: --train-config; when resuming, the run's own train.json (the ladder it was started with: its
  // learning-rate schedule and stages); <config>.train.json beside the model config; the built-in ladder.
  std::string tc_path = req.train_config_path;
  if (resuming && tc_path.empty() && fs::exists(out + "/train.json")) tc_path = out + "/train.json";
  if (tc_path.empty()) {
    const std::string beside = fs::path(config_path).replace_extension("").string() + ".train.json";
    if (fs::exists(beside)) tc_path = beside;
  }
  tc = tc_path.empty() ? default_train_config(mc) : load_train_config(tc_path, mc);
  if (req.seed) tc.seed = *req.seed;
  if (req.gradient_checkpointing) tc.gradient_checkpointing = *req.gradient_checkpointing;
  validate_data_parallel_split(tc, req.parallel.dims);
  if (!resuming && req.force && fs::exists(out)) fs::remove_all(out);
  // A run directory made here is removed again if the setup below fails (the data cannot be read, the
  // tokenizer cannot be trained...), so bad input leaves nothing behind; once training starts it stays.
  struct NewRunGuard {
    std::string dir;
    ~NewRunGuard() {
      std::error_code ignored;
      if (!dir.empty()) fs::remove_all(dir, ignored);
    }
  } guard;
  if (!fs::exists(out)) guard.dir = out;
  std::error_code ec;
  fs::create_directories(out, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot create the output directory ", out, ": ", ec.message());
  write_file_atomic(out + "/train.json", train_config_to_json(tc).dump(1));
  write_file_atomic(out + "/config.json", config_json);
  // Text for the tokenizer and the shards: the given paths, or the built-in corpus written into the run.
  std::vector<std::string> text_paths = req.data;
  if (req.data.empty() && !fs::exists(out + "/data/meta.json")) {
    if (!req.quiet) std::fprintf(stderr, "myriad train: generating the built-in corpus (prose and tasks)\n");
    std::string jsonl;
    for (const std::string& doc : generate_corpus(tc.seed, tc.builtin_corpus_bytes, tc.builtin_corpus))
      jsonl += nlohmann::json{{"text", doc}}.dump() + "\n";
    fs::create_directories(out + "/corpus");
    write_file_atomic(out + "/corpus/builtin.jsonl", jsonl);
    text_paths = {out + "/corpus/builtin.jsonl"};
  }
  // Tokenizer.
  const std::string tok_dir = out + "/tokenizer";
  if (!tokenizer_dir.empty()) {
    tok = Tokenizer::load(tokenizer_dir);
    tok.save(tok_dir);
  } else if (fs::exists(tok_dir + "/tokenizer.model")) {
    tok = Tokenizer::load(tok_dir);
  } else {
    MYRIAD_REQUIRE(!prepared, kValue, "prepared shards (", req.data[0],
                   ") need the tokenizer they were made with: --tokenizer DIR");
    if (!req.quiet) std::fprintf(stderr, "myriad train: training a %lld-token tokenizer\n", (long long)mc.vocab_size);
    if (images) {  // on the records' text
      fs::create_directories(out + "/corpus");
      write_file_atomic(out + "/corpus/image_text.txt", image_records_text(image_records));
      tok = Tokenizer::train({out + "/corpus/image_text.txt"}, mc.vocab_size, tok_dir);
    } else {
      tok = Tokenizer::train(text_paths, mc.vocab_size, tok_dir);
    }
  }
  MYRIAD_REQUIRE(tok.vocab_size() <= mc.vocab_size, kConfig, "the tokenizer has ", tok.vocab_size(),
                 " tokens but the model's vocab_size is ", mc.vocab_size);
  // The long-context grid's shortest prompt must hold its facts and question in this tokenizer: refused now, not at
  // the end of the first stage.
  if (tc.longctx_eval.enabled()) {
    const int64_t shortest = *std::min_element(tc.longctx_eval.lengths.begin(), tc.longctx_eval.lengths.end());
    try {
      (void)make_long_sample(parse_long_task(tc.longctx_eval.task), tok, shortest, 50, tc.seed);
    } catch (const Error& e) {
      throw_error(ErrorKind::kConfig, "train.json longctx_eval.lengths: ", e.what());
    }
  }
  if (tc.longctx_mix.enabled()) {
    int64_t shortest = std::numeric_limits<int64_t>::max();
    for (size_t s = 0; s < tc.stages.size(); ++s)
      if (tc.longctx_mix.fraction_of(int64_t(s)) > 0) shortest = std::min(shortest, tc.stages[s].seq_len);
    LongTaskMixSource::check_length(tok, tc.longctx_mix, shortest);
  }
  // Shards.
  std::string data_dir = out + "/data";
  if (images) write_file_atomic(out + "/image_data.txt", fs::absolute(req.data[0]).string());
  if (prepared || images) {
    data_dir = req.data[0];  // shards, or the image-text file (read by its source: images decoded once)
  } else if (!fs::exists(data_dir + "/meta.json")) {
    PrepareOptions po;
    po.progress = !req.quiet;
    po.tokenizer_path = tok_dir;
    prepare_data(tok, text_paths, data_dir, po);
  }
  guard.dir.clear();
  return PreparedRun{tc, config_json, data_dir, tok_dir};
}

}  // namespace

TrainSummary run_training(const RunRequest& request) {
  // A resumed image-text run without --data reads the records file it was started with (image_data.txt).
  RunRequest req = request;
  if (req.data.empty() && !req.resume.empty() && fs::exists(req.out_dir + "/image_data.txt"))
    req.data = {read_file(req.out_dir + "/image_data.txt")};
  std::vector<std::string> warnings;
  const ModelConfig mc = load_model_config(req.model_config_path, &warnings);
  // The ranks: one process, or every rank of the mpirun job (its layout validated before anything is written).
  const ParallelDims& dims = req.parallel.dims;
  const std::unique_ptr<TrainingRanks> ranks = open_training_ranks(dims);
  start_training_ranks(*ranks, dims, mc,
                       read_file(fs::is_directory(req.model_config_path) ? req.model_config_path + "/config.json"
                                                                         : req.model_config_path),
                       [&] { req.parallel.check(); });
  ProcessGroups& groups = ranks->groups;
  // Rank 0 prepares; the others then read the training config, tokenizer and shards it wrote.
  Tokenizer tok;
  PreparedRun run;
  prepare_on_root(*ranks, [&] { run = prepare_run(req, mc, tok); });
  if (!groups.is_root()) {
    const std::string out = req.out_dir;
    run.tc = load_train_config(out + "/train.json", mc);
    run.config_json = read_file(out + "/config.json");
    run.tok_dir = out + "/tokenizer";
    tok = Tokenizer::load(run.tok_dir);
    run.data_dir =
        req.data.size() == 1 && (is_shard_dir(req.data[0]) || is_image_data(req.data)) ? req.data[0] : out + "/data";
  }
  const TrainConfig& tc = run.tc;
  const std::string& out = req.out_dir;
  // Model (this rank's shard of the experts, each tensor as the one-process run would initialise it) and trainer.
  Transformer model(mc, ModelWeights::random(mc, tc.seed, ranks->keep));
  if (ranks->dispatcher) model.set_moe_dispatcher(ranks->dispatcher.get());
  std::unique_ptr<BatchSource> source;
  ImageTextFileSource* image_source = nullptr;
  if (is_image_data(req.data)) {
    auto s = std::make_unique<ImageTextFileSource>(run.data_dir, mc, tok, tc.seed, tc.image_shift);
    image_source = s.get();
    source = std::move(s);
  } else {
    source = std::make_unique<LoaderSource>(run.data_dir, tc.seed, tok);
  }
  if (tc.longctx_mix.enabled()) {
    MYRIAD_REQUIRE(!image_source, kConfig,
                   "train.json longctx_mix: long-context task samples mix into text data, not image-text records");
    source = std::make_unique<LongTaskMixSource>(std::move(source), tok, tc.longctx_mix, tc.seed,
                                                 int32_t(mc.pad_token_id.value_or(0)));
  }
  TrainerOptions to;
  to.run_dir = out;
  to.model_config_json = run.config_json;
  to.tokenizer_dir = run.tok_dir;
  to.groups = &groups;
  req.parallel.apply(to);
  to.stop_after_step = req.stop_after_step;
  to.quiet = req.quiet;
  to.memory_profile = req.memory_profile;
  const int32_t eot = tok.id_of("<|endoftext|>");
  if (tc.task_eval_per_task > 0 && (dims.ep > 1 || dims.sp > 1) && groups.is_root() && !req.quiet)
    std::fprintf(stderr,
                 "myriad train: task evaluation is off under --ep / --sp (it decodes with the whole model in "
                 "one process); validation loss is on\n");
  if (image_source && tc.task_eval_per_task > 0 && dims.ep == 1 && dims.sp == 1) {
    // Image questions: the held-out records' answers as generated (train/image_question_eval.h).
    to.evaluate_tasks = [&tok, &tc, image_source](const Transformer& m) {
      nlohmann::json j;
      const std::vector<ImageTextExample>& held = image_source->held_out();
      if (held.empty()) return j;
      InferenceModel inference(m.config(), DecodeWeights::from_model(m.weights()));
      inference.set_vision_weights(std::shared_ptr<const ModelWeights>(&m.weights(), [](const ModelWeights*) {}));
      ImageQuestionOptions o;
      o.max_new_tokens = int(tc.task_eval_max_new_tokens);
      const size_t n = std::min<size_t>(held.size(), size_t(tc.task_eval_per_task) * 8);
      const ImageQuestionReport r =
          evaluate_image_questions(inference, tok, std::span<const ImageTextExample>(held.data(), n), o);
      for (const auto& [type, c] : r.by_type) j["tasks"][type.empty() ? "answer" : type] = c.accuracy();
      for (const auto& s : r.samples) j["samples"].push_back({{"prompt", s.prompt}, {"got", s.got}, {"want", s.want}});
      return j;
    };
  } else if (tc.task_eval_per_task > 0 && dims.ep == 1 &&
             dims.sp == 1)  // the built-in tasks (on other data they only show the format is unknown)
    to.evaluate_tasks = [&tok, &tc, eot](const Transformer& m) {
      // With the tokenizer: ids past its vocabulary (a padded one) are never generated.
      const InferenceModel inference(m.config(), DecodeWeights::from_model(m.weights()), tok);
      TaskScores s = evaluate_tasks(
          inference, [&tok](const std::string& t) { return tok.encode(t); },
          [&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); }, int(tc.task_eval_per_task), tc.seed + 99,
          int(tc.task_eval_max_new_tokens), eot, 1);
      nlohmann::json j;
      j["tasks"] = s.by_name();
      for (const TaskSample& x : s.samples)
        j["samples"].push_back({{"prompt", x.prompt}, {"got", x.got}, {"want", x.want}});
      return j;
    };
  if (tc.longctx_eval.enabled() && dims.ep == 1 && dims.sp == 1)
    to.evaluate_long_context = [&tok, &tc](const Transformer& m) {
      LongContextOptions o;
      o.task = parse_long_task(tc.longctx_eval.task);
      o.lengths = tc.longctx_eval.lengths;
      o.depths.assign(tc.longctx_eval.depths.begin(), tc.longctx_eval.depths.end());
      o.samples = int(tc.longctx_eval.samples);
      o.seed = tc.seed + 7;
      const InferenceModel inference(m.config(), DecodeWeights::from_model(m.weights()));
      return evaluate_long_context(inference, tok, o).to_json();
    };
  Trainer trainer(model, tc, *source, to);
  if (!req.resume.empty()) trainer.resume(req.resume);
  if (!req.init.empty()) trainer.init_from(req.init);
  return trainer.run();
}

}  // namespace myriad
