// The training config: the shipped ladders parse, the schedule has the documented shape, bad fields are errors.
#include "train/train_config.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace myriad {
namespace {

std::string repo(const std::string& rel) {
  return std::string(MYRIAD_SOURCE_DIR) + "/" + rel;
}

TEST(TrainConfig, ShippedLaddersParse) {
  const ModelConfig k3 = load_model_config(repo("configs/kimi-k3.json"), nullptr);
  const TrainConfig t = load_train_config(repo("configs/kimi-k3.train.json"), k3);
  ASSERT_EQ(t.stages.size(), 4u);
  EXPECT_EQ(t.stages[0].seq_len, 8192);
  EXPECT_EQ(t.stages[3].seq_len, 1048576);
  for (const char* name : {"tiny", "small"}) {
    const ModelConfig m = load_model_config(repo(std::string("configs/") + name + ".json"), nullptr);
    const TrainConfig tc = load_train_config(repo(std::string("configs/") + name + ".train.json"), m);
    EXPECT_GE(tc.stages.size(), 2u) << name;
    for (size_t i = 1; i < tc.stages.size(); ++i) EXPECT_GT(tc.stages[i].seq_len, tc.stages[i - 1].seq_len) << name;
  }
}

TEST(TrainConfig, WarmupThenCosineToTheFloorAndStages) {
  const ModelConfig m = load_model_config(repo("configs/tiny.json"), nullptr);
  const TrainConfig t = parse_train_config(
      nlohmann::json::parse(
          R"({"stages": [{"seq_len": 64, "steps": 60}, {"seq_len": 128, "steps": 40, "lr_scale": 0.5}],
                              "lr": 0.01, "warmup_steps": 10, "min_lr_ratio": 0.1, "batch_tokens": 512})"),
      "t", m);
  EXPECT_NEAR(t.lr_at(0), 0.001, 1e-12);  // (0 + 1) / 10 of the peak
  EXPECT_NEAR(t.lr_at(9), 0.01, 1e-12);
  EXPECT_NEAR(t.lr_at(10), 0.01, 1e-12);  // cosine starts at the peak
  EXPECT_LT(t.lr_at(50), t.lr_at(20));
  EXPECT_NEAR(t.lr_at(99), 0.5 * 0.01 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 89.0 / 90.0))), 1e-12);
  EXPECT_EQ(t.stage_of(59), 0);
  EXPECT_EQ(t.stage_of(60), 1);
  EXPECT_EQ(t.sequences_per_step(0), 8);
  EXPECT_EQ(t.sequences_per_step(1), 4);
  EXPECT_EQ(t.total_steps(), 100);
}

TEST(TrainConfig, BadFieldsAreErrorsNamingTheField) {
  const ModelConfig m = load_model_config(repo("configs/tiny.json"), nullptr);
  auto expect_error = [&](const char* json, const char* needle) {
    try {
      parse_train_config(nlohmann::json::parse(json), "t.json", m);
      ADD_FAILURE() << "no error for " << json;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"stages": [{"seq_len": 4096, "steps": 1}]})", "max_position_embeddings");  // tiny: 2048
  expect_error(R"({"stages": []})", "stages");
  expect_error(R"({"stages": [{"seq_len": 64, "steps": 1}], "lr": -1})", "lr");
  expect_error(R"({"stages": [{"seq_len": 64, "steps": 1}], "learning_rate": 0.1})", "learning_rate");
  expect_error(R"({"stages": [{"seq_len": "long", "steps": 1}]})", "seq_len");
}

// The long-context grid at every stage's end: read with defaults; lengths bounded by the model's context, depths
// by 0..100, the task by name, unknown fields refused; absent means off.
TEST(TrainConfig, LongContextEvalIsReadAndChecked) {
  const ModelConfig m = load_model_config(repo("configs/tiny.json"), nullptr);  // max_position_embeddings 2048
  const char* stages = R"("stages": [{"seq_len": 64, "steps": 1}])";
  auto parse = [&](const std::string& extra) {
    return parse_train_config(nlohmann::json::parse("{" + std::string(stages) + extra + "}"), "t.json", m);
  };
  EXPECT_FALSE(parse("").longctx_eval.enabled());
  const TrainConfig t = parse(R"(, "longctx_eval": {"task": "vartrack", "lengths": [512, 2048]})");
  ASSERT_TRUE(t.longctx_eval.enabled());
  EXPECT_EQ(t.longctx_eval.task, "vartrack");
  EXPECT_EQ(t.longctx_eval.lengths, (std::vector<int64_t>{512, 2048}));
  EXPECT_EQ(t.longctx_eval.depths, (std::vector<int64_t>{0, 25, 50, 75, 100}));
  EXPECT_EQ(t.longctx_eval.samples, 2);
  EXPECT_EQ(train_config_to_json(t)["longctx_eval"]["lengths"], nlohmann::json::parse("[512, 2048]"));
  auto expect_error = [&](const std::string& extra, const std::vector<std::string>& needles) {
    try {
      parse(extra);
      ADD_FAILURE() << "no error for " << extra;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  expect_error(R"(, "longctx_eval": {"lengths": [4096]})", {"longctx_eval.lengths", "4096", "2048"});
  expect_error(R"(, "longctx_eval": {"lengths": [512], "depths": [0, 101]})", {"longctx_eval.depths", "101"});
  expect_error(R"(, "longctx_eval": {"lengths": [512], "task": "needle"})", {"longctx_eval.task", "needle"});
  expect_error(R"(, "longctx_eval": {"lengths": [512], "samples": 0})", {"longctx_eval.samples"});
  expect_error(R"(, "longctx_eval": {"lengths": [512], "depth": [0]})", {"depth"});
  expect_error(R"(, "longctx_eval": {"depths": [0]})", {"longctx_eval.lengths"});

  // longctx_mix: tasks (default passkey) and a fraction in (0, 1].
  EXPECT_FALSE(parse("").longctx_mix.enabled());
  const TrainConfig mix = parse(R"(, "longctx_mix": {"tasks": ["passkey", "multikey"], "fraction": 0.25})");
  ASSERT_TRUE(mix.longctx_mix.enabled());
  EXPECT_EQ(mix.longctx_mix.tasks, (std::vector<std::string>{"passkey", "multikey"}));
  EXPECT_DOUBLE_EQ(mix.longctx_mix.fraction, 0.25);
  EXPECT_EQ(train_config_to_json(mix)["longctx_mix"]["fraction"], 0.25);
  EXPECT_EQ(parse(R"(, "longctx_mix": {"fraction": 1})").longctx_mix.tasks, (std::vector<std::string>{"passkey"}));
  expect_error(R"(, "longctx_mix": {"fraction": 0})", {"longctx_mix.fraction", "no sample would be mixed in"});
  expect_error(R"(, "longctx_mix": {"fraction": 1.5})", {"longctx_mix.fraction", "1.5"});
  expect_error(R"(, "longctx_mix": {"tasks": ["needle"], "fraction": 0.5})", {"longctx_mix.tasks", "needle"});
  expect_error(R"(, "longctx_mix": {"tasks": [], "fraction": 0.5})", {"longctx_mix.tasks"});
  expect_error(R"(, "longctx_mix": {"tasks": ["passkey"]})", {"fraction"});

  // A stage's own share (stages[i].longctx_fraction) replaces longctx_mix.fraction for that stage, and survives the
  // round trip through train_config_to_json; it needs longctx_mix and lies in [0, 1].
  auto ladder = [&](const std::string& second_stage, const std::string& extra) {
    return parse_train_config(
        nlohmann::json::parse(R"({"stages": [{"seq_len": 64, "steps": 1}, )" + second_stage + "]" + extra + "}"),
        "t.json", m);
  };
  const TrainConfig staged =
      ladder(R"({"seq_len": 128, "steps": 1, "longctx_fraction": 0.5})", R"(, "longctx_mix": {"fraction": 1})");
  EXPECT_EQ(staged.longctx_mix.stage_fractions, (std::vector<double>{1.0, 0.5}));
  EXPECT_DOUBLE_EQ(staged.longctx_mix.fraction_of(0), 1.0);
  EXPECT_DOUBLE_EQ(staged.longctx_mix.fraction_of(1), 0.5);
  const TrainConfig again = parse_train_config(train_config_to_json(staged), "t.json", m);
  EXPECT_EQ(again.longctx_mix.stage_fractions, staged.longctx_mix.stage_fractions);
  // fraction 0 with a stage above 0: only that stage mixes.
  const TrainConfig late =
      ladder(R"({"seq_len": 128, "steps": 1, "longctx_fraction": 0.25})", R"(, "longctx_mix": {"fraction": 0})");
  EXPECT_TRUE(late.longctx_mix.enabled());
  EXPECT_DOUBLE_EQ(late.longctx_mix.fraction_of(0), 0.0);
  EXPECT_DOUBLE_EQ(late.longctx_mix.fraction_of(1), 0.25);
  auto ladder_error = [&](const std::string& second_stage, const std::string& extra,
                          const std::vector<std::string>& needles) {
    try {
      ladder(second_stage, extra);
      ADD_FAILURE() << "no error for " << second_stage << extra;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  ladder_error(R"({"seq_len": 128, "steps": 1, "longctx_fraction": 0.5})", "",
               {"stages[1].longctx_fraction", "needs longctx_mix"});
  ladder_error(R"({"seq_len": 128, "steps": 1, "longctx_fraction": 1.5})", R"(, "longctx_mix": {"fraction": 1})",
               {"stages[1].longctx_fraction", "1.5", "[0, 1]"});
  ladder_error(R"({"seq_len": 128, "steps": 1, "longctx_fraction": 0})", R"(, "longctx_mix": {"fraction": 0})",
               {"longctx_mix.fraction", "no sample would be mixed in"});
}

// The training config follows the model config's reader (core/json_fields.h): an integer field refuses a float
// (it used to truncate 2.5 to 2), messages carry the JSON path, the value as written and the rule, and unknown
// fields are errors at every level (stage entries used to be unchecked).
// The built-in corpus's size and mix: read, written back to the run's train.json, checked field by field.
TEST(TrainConfig, BuiltinCorpusMixIsReadAndChecked) {
  const ModelConfig m = load_model_config(repo("configs/tiny.json"), nullptr);
  auto parse = [&](const std::string& extra) {
    return parse_train_config(nlohmann::json::parse(R"({"stages": [{"seq_len": 64, "steps": 1}])" + extra + "}"),
                              "t.json", m);
  };
  const TrainConfig d = parse("");
  EXPECT_EQ(d.builtin_corpus_bytes, size_t(3) << 20);
  EXPECT_EQ(d.builtin_corpus.task_share, 0.5);
  EXPECT_FALSE(train_config_to_json(d).contains("builtin_corpus"));
  const TrainConfig t =
      parse(R"(, "builtin_corpus": {"bytes": 100000, "task_share": 0.7, "task_weights": {"arithmetic": 3}})");
  EXPECT_EQ(t.builtin_corpus_bytes, 100000u);
  EXPECT_DOUBLE_EQ(t.builtin_corpus.task_share, 0.7);
  EXPECT_EQ(t.builtin_corpus.task_weights, (std::array<double, 4>{3.0, 1.0, 1.0, 1.0}));
  const TrainConfig back = parse_train_config(train_config_to_json(t), "back.json", m);
  EXPECT_EQ(back.builtin_corpus_bytes, t.builtin_corpus_bytes);
  EXPECT_EQ(back.builtin_corpus.task_share, t.builtin_corpus.task_share);
  EXPECT_EQ(back.builtin_corpus.task_weights, t.builtin_corpus.task_weights);
  auto expect_error = [&](const std::string& extra, const std::string& needle) {
    try {
      parse(extra);
      ADD_FAILURE() << "no error for " << extra;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(R"(, "builtin_corpus": {"task_share": 1.2})", "builtin_corpus.task_share");
  expect_error(R"(, "builtin_corpus": {"bytes": 10})", "builtin_corpus.bytes");
  expect_error(R"(, "builtin_corpus": {"task_weights": {"addition": 1}})", "addition");
  expect_error(R"(, "builtin_corpus": {"task_weights": {"copy": -1}})", "builtin_corpus.task_weights.copy");
  expect_error(R"(, "builtin_corpus": {"task_weights": {"arithmetic": 0, "copy": 0, "reverse": 0, "recall": 0}})",
               "builtin_corpus.task_weights");
  expect_error(R"(, "builtin_corpus": {"share": 0.5})", "share");
}

TEST(TrainConfig, SharesTheModelConfigRules) {
  const ModelConfig m = load_model_config(repo("configs/tiny.json"), nullptr);
  auto message = [&](const char* json) -> std::string {
    try {
      parse_train_config(nlohmann::json::parse(json), "t.json", m);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error for " << json;
    return "";
  };
  EXPECT_EQ(message(R"({"stages": [{"seq_len": 64, "steps": 1}], "warmup_steps": 2.5})"),
            "t.json: warmup_steps = 2.5: must be an integer (got a float)");
  EXPECT_EQ(message(R"({"stages": [{"seq_len": 64, "steps": 2.0}]})"),
            "t.json: stages[0].steps = 2.0: must be an integer (got a float)");
  EXPECT_EQ(message(R"({"stages": [{"seq_len": 64, "steps": 1, "stepz": 3}]})")
                .rfind("t.json: stages[0].stepz: unknown field", 0),
            0u);
  EXPECT_EQ(message(R"({"stages": [{"seq_len": 64, "steps": 1}], "seed": -1})"), "t.json: seed = -1: must be >= 0");
  EXPECT_EQ(message(R"({"stages": [{"seq_len": 64, "steps": 1}], "log_every": 0})"),
            "t.json: log_every = 0: must be >= 1");
  EXPECT_EQ(message(R"({"stages": [{"steps": 1}]})"), "t.json: stages[0].seq_len: required field is missing");
  EXPECT_EQ(message(R"({"stages": [{"seq_len": 64, "steps": 1}], "gradient_checkpointing": 1})"),
            "t.json: gradient_checkpointing = 1: must be true or false (got number)");
  // A comment is allowed; a full seed range is kept.
  const TrainConfig t = parse_train_config(
      nlohmann::json::parse(
          R"({"comment": "x", "stages": [{"seq_len": 64, "steps": 1}], "seed": 18446744073709551615})"),
      "t.json", m);
  EXPECT_EQ(t.seed, 18446744073709551615ull);
}

}  // namespace
}  // namespace myriad
