// Image-text training (train/image_text_source.h, the trainer's image batches): the batches put the images'
// tokens where the placeholders are and count the answers only; a short training run on shape scenes lowers the
// held-out loss and moves every part of the vision tower (the gradient reaches it through the text model).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "autograd/functions.h"
#include "model/weights.h"
#include "train/image_text_source.h"

namespace myriad {
namespace {

ModelConfig vlm_config() {
  ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  VisionConfig v;
  v.patch_size = 7;
  v.vt_hidden_size = 32;
  v.vt_intermediate_size = 64;
  v.vt_num_attention_heads = 2;
  v.vt_num_hidden_layers = 1;
  v.merge_kernel_size = {2, 2};
  v.text_hidden_size = c.hidden_size;
  v.mm_hidden_size = 32;
  v.init_pos_emb_height = 8;
  v.init_pos_emb_width = 8;
  v.init_pos_emb_time = 4;
  c.vision_config = v;
  return c;
}

const Tokenizer& qa_tokenizer() {
  static const Tokenizer tok = [] {
    std::vector<std::string> texts;
    for (uint64_t i = 0; i < 300; ++i)
      for (const ShapeQuestion& q : make_shape_scene(i).questions) texts.push_back(q.question + " " + q.answer);
    return Tokenizer::train_from_texts(texts, 300);
  }();
  return tok;
}

TEST(ImageText, BatchesPlaceImagesAndCountAnswersOnly) {
  const ModelConfig c = vlm_config();
  ShapeSceneSource src(c, qa_tokenizer());
  const ImageTextExample e = src.example(4, 1);
  EXPECT_EQ(e.images.grids.at(0).h, 8);  // 56 pixels at patch 7, nothing resized
  const TrainBatch b = src.next(128);
  ASSERT_EQ(b.tokens.numel(), 128);
  const int64_t* tok = b.tokens.data<int64_t>();
  const int64_t* tgt = b.targets.data<int64_t>();
  int64_t placeholders = 0, counted = 0;
  for (int64_t t = 0; t < 128; ++t) {
    placeholders += tok[t] == *c.media_placeholder_token_id;
    if (tgt[t] >= 0) {
      ++counted;
      EXPECT_EQ(tgt[t], tok[t + 1]);                         // the next token ...
      EXPECT_NE(tok[t + 1], *c.media_placeholder_token_id);  // ... never an image token
    }
  }
  int64_t image_tokens = 0, patches = 0;
  for (const PatchGrid& g : b.grids) image_tokens += vision_tokens(*c.vision_config, g), patches += g.patches();
  EXPECT_GE(b.grids.size(), 2u);
  EXPECT_EQ(placeholders, image_tokens);
  EXPECT_EQ(b.patches.shape(), (Shape{patches, 3 * 7 * 7}));
  EXPECT_GT(counted, 0);
  // The state resumes exactly.
  ShapeSceneSource again(c, qa_tokenizer());
  again.restore(src.state());
  const TrainBatch x = src.next(128), y = again.next(128);
  EXPECT_EQ(x.tokens.to_vector(), y.tokens.to_vector());
  EXPECT_THROW(src.next(10), Error);  // one example is longer than 10 tokens
}

TEST(ImageText, TrainingLowersTheHeldOutLossAndReachesTheTower) {
  const ModelConfig c = vlm_config();
  Transformer model(c, ModelWeights::random(c, 3));
  const Tensor tower_before = model.p("vision_tower.encoder.blocks.0.wqkv.weight").value().clone();
  const Tensor pos_before = model.p("vision_tower.patch_embed.pos_emb.weight").value().clone();
  ShapeSceneSource src(c, qa_tokenizer());
  const TrainConfig tc = parse_train_config({{"stages", {{{"seq_len", 128}, {"steps", 60}}}},
                                             {"batch_tokens", 512},
                                             {"lr", 0.003},
                                             {"warmup_steps", 5},
                                             {"eval_every", 60},
                                             {"eval_batches", 4},
                                             {"checkpoint_every", 60},
                                             {"log_every", 60},
                                             {"kda_chunk", 32}},
                                            "test", c);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("myriad_vlm_" + std::to_string(getpid()))).string();
  TrainerOptions to;
  to.run_dir = dir;
  to.model_config_json = "{}";
  to.quiet = true;
  auto val_loss = [&] {
    ag::NoGradGuard ng;
    double sum = 0;
    const auto batches = src.validation(128, 4);
    for (const TrainBatch& b : batches) {
      ForwardOptions fo;
      fo.kda_chunk = 32;
      const ag::Var f = encode_images(*c.vision_config, model.weights(), ag::Var(b.patches), b.grids);
      fo.image_features = &f;
      sum += model.forward(b.tokens, b.targets, fo).loss.value().data<float>()[0];
    }
    return sum / double(batches.size());
  };
  const double before = val_loss();
  Trainer trainer(model, tc, src, to);
  const TrainSummary s = trainer.run();
  const double after = val_loss();
  EXPECT_EQ(s.steps, 60);
  // 60 steps of 4 sequences: the answers' loss falls well below its start (~ln 300 = 5.7 for a random head).
  EXPECT_LT(after, 0.6 * before) << before << " -> " << after;
  auto moved = [](const Tensor& a, const Tensor& b) {
    double m = 0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    return m;
  };
  EXPECT_GT(moved(tower_before, model.p("vision_tower.encoder.blocks.0.wqkv.weight").value()), 1e-4);
  EXPECT_GT(moved(pos_before, model.p("vision_tower.patch_embed.pos_emb.weight").value()), 1e-5);
  std::filesystem::remove_all(dir);
}

// Stage 1 freezes the text model and the tower (the projector alone trains: every other tensor keeps its bits,
// the routers' balancing biases too); stage 2 trains everything. The config names modules and refuses others.
TEST(ImageText, StagesFreezeTheModulesTheyName) {
  const ModelConfig c = vlm_config();
  Transformer model(c, ModelWeights::random(c, 4));
  ShapeSceneSource src(c, qa_tokenizer());
  auto config = [&](int64_t stage2_steps) {
    nlohmann::json stages = {{{"seq_len", 128}, {"steps", 3}, {"freeze", {"text_model", "vision_tower"}}}};
    if (stage2_steps) stages.push_back({{"seq_len", 128}, {"steps", stage2_steps}});
    return parse_train_config({{"stages", stages},
                               {"batch_tokens", 256},
                               {"warmup_steps", 1},
                               {"eval_every", 100},
                               {"checkpoint_every", 100},
                               {"log_every", 100},
                               {"kda_chunk", 32}},
                              "test", c);
  };
  auto snapshot = [&] {
    std::map<std::string, std::vector<float>> out;
    for (const auto& [name, v] : model.weights().all()) out[name] = v.value().contiguous().to_vector();
    return out;
  };
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("myriad_vlm_freeze_" + std::to_string(getpid()))).string();
  TrainerOptions to;
  to.run_dir = dir;
  to.model_config_json = "{}";
  to.quiet = true;
  const auto before = snapshot();
  {
    Trainer stage1(model, config(0), src, to);
    stage1.run();
  }
  const auto after1 = snapshot();
  int moved_projector = 0;
  for (const auto& [name, values] : before) {
    const bool projector = std::string(module_of_tensor(name)) == "mm_projector";
    if (projector)
      moved_projector += values != after1.at(name);
    else
      EXPECT_EQ(values, after1.at(name)) << name << " moved in a stage that freezes it";
  }
  EXPECT_GT(moved_projector, 0);
  std::filesystem::remove_all(dir);
  {
    Trainer both(model, config(3), src, to);
    both.run();
  }
  const auto after2 = snapshot();
  EXPECT_NE(after1.at("vision_tower.encoder.blocks.0.wqkv.weight"),
            after2.at("vision_tower.encoder.blocks.0.wqkv.weight"));
  EXPECT_NE(after1.at("lm_head.weight"), after2.at("lm_head.weight"));
  std::filesystem::remove_all(dir);
  for (const auto& [freeze, why] : std::vector<std::pair<nlohmann::json, const char*>>{
           {{"text_model", "vision_tower", "mm_projector"}, "nothing would train"}, {{"encoder"}, "not a module"}}) {
    try {
      parse_train_config({{"stages", {{{"seq_len", 128}, {"steps", 1}, {"freeze", freeze}}}}}, "t.json", c);
      ADD_FAILURE() << "accepted " << freeze.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("stages[0].freeze"), std::string::npos) << e.what();
    }
  }
  const ModelConfig text = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  EXPECT_THROW(
      parse_train_config({{"stages", {{{"seq_len", 128}, {"steps", 1}, {"freeze", {"vision_tower"}}}}}}, "t", text),
      Error);
}

}  // namespace
}  // namespace myriad
