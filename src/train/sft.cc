// `myriad sft`: see sft.h.
#include "train/sft.h"

#include <cstdio>
#include <filesystem>

#include "core/json_fields.h"
#include "data/chat/conversation.h"
#include "infer/decode_weights.h"
#include "infer/weight_layout.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "model/config.h"
#include "model/param_spec.h"
#include "train/agent_eval.h"
#include "train/run_checkpoint.h"
#include "train/sft_data.h"
#include "train/task_eval.h"
#include "train/train_config.h"
#include "train/training_ranks.h"

namespace fs = std::filesystem;

namespace myriad {

nlohmann::json default_sft_train_config(int64_t max_position_embeddings) {
  return {{"stages", {{{"seq_len", std::min<int64_t>(512, max_position_embeddings)}, {"steps", 300}}}},
          {"batch_tokens", 4096},
          {"lr", 1e-3},
          {"warmup_steps", 10},
          {"eval_every", 100},
          {"checkpoint_every", 100},
          {"task_eval_per_task", 0}};
}

TrainSummary run_sft(const SftRequest& req) {
  // Every rank of an mpirun job reads the inputs; rank 0 alone writes the run directory (train/training_ranks.h).
  const std::unique_ptr<TrainingRanks> ranks = open_training_ranks(req.parallel.dims);
  const bool resuming = !req.resume.empty();
  const std::string out = req.out_dir.empty() ? req.resume : req.out_dir;
  MYRIAD_REQUIRE(!out.empty(), kValue, "sft needs --out DIR (or --resume DIR)");
  nlohmann::json meta;
  // The resumed run's sft.json, read through JsonFields: a damaged field is one error naming the file and the field
  // (json::value would throw a bare type_error for a number where a path belongs, or a null).
  const JsonSource meta_src{out + "/sft.json", UnknownFields::kWarn, nullptr, nullptr};
  const auto saved = [&] { return JsonFields(meta, "", meta_src); };
  if (resuming) {
    MYRIAD_REQUIRE(fs::exists(out + "/sft.json"), kIo, out, " is not an SFT run (no sft.json)");
    meta = parse_json_document(read_file(out + "/sft.json"), out + "/sft.json", ErrorKind::kFormat);
  }
  // The source model: the fine-tuned run's own copy when resuming (its checkpoints hold everything).
  const std::string model_dir = resuming ? saved().string_or("model", "") : req.model_dir;
  MYRIAD_REQUIRE(!model_dir.empty(), kValue, "sft needs --model DIR (a training run or a checkpoint)");
  // A resumed run reads the tokenizer its checkpoints saved; --tokenizer applies to a new run.
  const CheckpointModel start = resuming ? open_checkpoint_model(latest_checkpoint(out))
                                         : open_checkpoint_model(latest_checkpoint(model_dir), req.tokenizer);
  const std::string& source_ck = start.dir;
  const std::string& config_json = start.config_json;
  const ModelConfig& mc = start.config;
  const Tokenizer& tok = start.tokenizer;

  // The conversations, all checked before anything is written.
  const std::string data = req.data_path.empty() && resuming ? saved().string_or("data", "") : req.data_path;
  MYRIAD_REQUIRE(!data.empty(), kValue, "sft needs --data FILE.jsonl (OpenAI-format conversations)");
  const std::string val = req.val_path.empty() && resuming ? saved().string_or("val", "") : req.val_path;
  std::vector<Conversation> convs = read_conversations(data);
  MYRIAD_REQUIRE(!convs.empty(), kValue, data, " holds no conversations");
  std::vector<Conversation> val_convs;
  if (!val.empty()) {
    val_convs = read_conversations(val);
  } else if (convs.size() >= 20) {
    std::vector<Conversation> train;
    for (size_t i = 0; i < convs.size(); ++i) (i % 20 == 19 ? val_convs : train).push_back(std::move(convs[i]));
    convs = std::move(train);
  }
  const std::string pretrain_data =
      req.pretrain_data.empty() && resuming ? saved().string_or("pretrain_data", "") : req.pretrain_data;
  const double pretrain_mix =
      req.pretrain_data.empty() && resuming ? saved().double_or("pretrain_mix", 0.0) : req.pretrain_mix;
  MYRIAD_REQUIRE(pretrain_mix >= 0 && pretrain_mix < 1, kValue, "--pretrain-mix ", pretrain_mix, " must lie in [0, 1)");
  MYRIAD_REQUIRE(pretrain_mix == 0 || !pretrain_data.empty(), kValue,
                 "--pretrain-mix needs --pretrain-data DIR (a prepared shard directory)");
  std::vector<Batch> text_val;
  if (!pretrain_data.empty())
    text_val = text_validation_batches(pretrain_data, std::min<int64_t>(256, mc.max_position_embeddings), 8);
  std::vector<ChatTokens> train_tokens = encode_conversations(tok, convs, data);
  std::vector<ChatTokens> val_tokens = encode_conversations(tok, val_convs, val.empty() ? data : val);

  // The training config.
  std::string tc_path = req.train_config_path;
  if (tc_path.empty() && resuming) tc_path = out + "/train.json";
  TrainConfig tc = tc_path.empty()
                       ? parse_train_config(default_sft_train_config(mc.max_position_embeddings), "the SFT default", mc)
                       : load_train_config(tc_path, mc);
  if (req.seed) tc.seed = *req.seed;
  if (req.steps) {
    MYRIAD_REQUIRE(tc.stages.size() == 1, kConfig, "--steps sets the steps of a one-stage config; this one has ",
                   tc.stages.size(), " stages");
    tc.stages[0].steps = *req.steps;
  }

  start_training_ranks(*ranks, req.parallel.dims, mc, config_json, [&] {
    req.parallel.check();
    validate_data_parallel_split(tc, req.parallel.dims);
  });
  if (!resuming)
    prepare_on_root(*ranks, [&] {
      start_run_directory(out, req.force);
      write_file_atomic(out + "/train.json", train_config_to_json(tc).dump(1));
      write_file_atomic(out + "/config.json", config_json);
      tok.save(out + "/tokenizer");
      int64_t assistant = 0;
      for (const ChatTokens& c : train_tokens)
        assistant += std::count(c.assistant.begin(), c.assistant.end(), uint8_t(1));
      meta = {{"model", fs::absolute(model_dir).string()},
              {"model_checkpoint", fs::absolute(source_ck).string()},
              {"data", fs::absolute(data).string()},
              {"val", val.empty() ? std::string() : fs::absolute(val).string()},
              {"train_conversations", train_tokens.size()},
              {"val_conversations", val_tokens.size()},
              {"assistant_tokens", assistant},
              {"pretrain_data", pretrain_data.empty() ? std::string() : fs::absolute(pretrain_data).string()},
              {"pretrain_mix", pretrain_mix}};
      write_file_atomic(out + "/sft.json", meta.dump(1) + "\n");
    });

  Transformer model(mc, ModelWeights::from_checkpoint(open_model_checkpoint(source_ck, mc), mc, ranks->keep));
  if (ranks->dispatcher) model.set_moe_dispatcher(ranks->dispatcher.get());
  ConversationSource source(tok, std::move(train_tokens), std::move(val_tokens), tc.seed);
  if (pretrain_mix > 0) source.set_pretraining_mix(std::make_unique<Loader>(pretrain_data, tc.seed), pretrain_mix);
  TrainerOptions to;
  to.run_dir = out;
  to.model_config_json = config_json;
  to.tokenizer_dir = out + "/tokenizer";
  to.stop_after_step = req.stop_after_step;
  to.quiet = req.quiet;
  to.groups = &ranks->groups;
  req.parallel.apply(to);
  if (req.agent_eval_per_family > 0 || !text_val.empty()) {
    AgentEvalOptions ao;
    ao.per_family = req.agent_eval_per_family;
    to.evaluate_tasks = [&tok, &text_val, &tc, ao](const Transformer& m) {
      nlohmann::json j = {{"samples", nlohmann::json::array()}};
      if (ao.per_family > 0) {
        const InferenceModel inference(m.config(), DecodeWeights::from_model(m.weights()));
        const AgentEvalReport r = evaluate_agent(inference, tok, ao);
        j["agent"] = r.to_json();
        for (const nlohmann::json& t : r.transcripts)
          j["samples"].push_back({{"prompt", t["prompt"]}, {"got", t["text"]}, {"want", t["want"]}});
      }
      if (!text_val.empty()) j["pretrain_val_loss"] = text_loss(m, text_val, tc.kda_chunk);
      return j;
    };
  }
  if (!req.quiet && ranks->root())
    std::fprintf(stderr, "myriad sft: %lld training conversations (%lld assistant tokens), %lld for validation\n",
                 static_cast<long long>(source.train_conversations()),
                 static_cast<long long>(source.assistant_tokens()),
                 static_cast<long long>(saved().int_or("val_conversations", 0)));
  Trainer trainer(model, tc, source, to);
  if (resuming) trainer.resume(out);
  TrainSummary s = trainer.run();
  if (!req.quiet && ranks->root() && source.truncated() > 0)
    std::fprintf(stderr, "myriad sft: %lld conversations were longer than a sequence and were cut\n",
                 static_cast<long long>(source.truncated()));
  return s;
}

}  // namespace myriad
