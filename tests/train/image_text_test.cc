// Image-text training (train/image_text_source.h, the trainer's image batches): the batches put the images'
// tokens where the placeholders are and count the answers only; a short training run on shape scenes lowers the
// held-out loss and moves every part of the vision tower (the gradient reaches it through the text model); stages
// freeze the modules they name; image-text JSONL records become the examples their kind says and resume exactly;
// answers are scored as the serving engine generates them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "autograd/functions.h"
#include "data/datasets/image_store.h"
#include "data/datasets/image_text_records.h"
#include "infer/decode_weights.h"
#include "io/atomic_file.h"
#include "model/weights.h"
#include "serve/engine.h"
#include "train/image_question_eval.h"
#include "train/image_text_source.h"
#include "train/vision_training.h"
#include "vision_fixture.h"

namespace myriad {
namespace {

ModelConfig vlm_config() {
  ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  c.vision_config =
      test::small_vision_config(/*patch=*/7, /*width=*/32, /*mlp=*/64, /*text_hidden=*/c.hidden_size, /*pos_grid=*/8);
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
  auto val_loss = [&] { return test::held_out_loss(model, c, src, 128, 4); };
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

Image random_image(int64_t w, int64_t h, uint32_t seed) {
  std::mt19937 rng(seed);
  Image im;
  im.width = w;
  im.height = h;
  for (int64_t i = 0; i < w * h * 3; ++i) im.rgb.push_back(uint8_t(rng() % 256));
  return im;
}

std::vector<int32_t> text_ids(const std::string& s) {
  return qa_tokenizer().encode(s, Specials::kAsText);
}

// Each kind of record: its tokens built here from the tokenizer's own encoding of the pieces, and which are targets.
TEST(ImageText, FileRecordsBecomeTheirKindsOfExamplesAndResumeExactly) {
  const ModelConfig c = vlm_config();
  const Tokenizer& tok = qa_tokenizer();
  const int32_t ph = int32_t(*c.media_placeholder_token_id), eot = tok.end_of_text_id();
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("myriad_itf_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir + "/img");
  write_file_atomic(dir + "/img/a.png", encode_png(random_image(28, 28, 1)));  // 4 x 4 patches of 7: 4 tokens
  const std::string b_uri = png_data_uri(random_image(56, 28, 2));             // 4 x 8 patches: 8 tokens
  std::ofstream(dir + "/data.jsonl")
      << R"({"images": ["img/a.png"], "text": "a <|image|> red"})"
      << "\n\n"
      << R"({"images": [")" << b_uri << R"("], "prompt": "how many?", "answer": "3", "type": "count"})"
      << "\n"
      << R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "img/a.png"}}, )"
      << R"({"type": "text", "text": "what?"}]}, {"role": "assistant", "content": "a square"}]})"
      << "\n";
  const std::vector<ImageTextRecord> records = read_image_text_records(dir + "/data.jsonl");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].where, dir + "/data.jsonl:3");
  auto concat = [](std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  auto targets_text = [&](const ImageTextExample& e) {
    std::vector<int32_t> t;
    for (size_t i = 0; i < e.tokens.size(); ++i)
      if (e.predicted[i]) t.push_back(e.tokens[i]);
    return t;
  };
  const ImageTextExample caption = record_example(records[0], c, tok);
  EXPECT_EQ(caption.tokens, concat({text_ids("a "), std::vector<int32_t>(4, ph), text_ids(" red"), {eot}}));
  EXPECT_EQ(targets_text(caption), concat({text_ids("a "), text_ids(" red"), {eot}}));
  const ImageTextExample question = record_example(records[1], c, tok);
  EXPECT_EQ(question.tokens, concat({std::vector<int32_t>(8, ph), text_ids("how many?"), text_ids(" 3"), {eot}}));
  EXPECT_EQ(targets_text(question), concat({text_ids(" 3"), {eot}}));
  EXPECT_EQ(question.prompt_tokens, 8 + int64_t(text_ids("how many?").size()));
  EXPECT_EQ(question.type, "count");
  const ImageTextExample chat = record_example(records[2], c, tok);
  EXPECT_EQ(std::count(chat.tokens.begin(), chat.tokens.end(), ph), 4);
  EXPECT_EQ(tok.decode(targets_text(chat)), "a square<|endoftext|>");  // the assistant's turn and its end only

  // A file of 40 records: 2 held out; batches hold their examples' patches; the state resumes exactly, also
  // across an epoch's end.
  {
    std::ofstream many(dir + "/many.jsonl");
    for (int i = 0; i < 40; ++i)
      many << R"({"images": ["img/a.png"], "prompt": "q)" << i << R"(?", "answer": ")" << i % 10 << R"("})"
           << "\n";
  }
  ImageTextFileSource src(dir + "/many.jsonl", c, tok, 5);
  EXPECT_EQ(src.train_examples(), 38u);
  EXPECT_EQ(src.held_out().size(), 2u);
  const TrainBatch first = src.next(64);
  int64_t rows = 0;
  for (const PatchGrid& g : first.grids) rows += g.patches();
  EXPECT_EQ(first.patches.shape()[0], rows);
  EXPECT_EQ(std::count(first.tokens.data<int64_t>(), first.tokens.data<int64_t>() + 64, ph),
            4 * int64_t(first.grids.size()));
  for (int i = 0; i < 7; ++i) src.next(64);
  ImageTextFileSource again(dir + "/many.jsonl", c, tok, 5);
  again.restore(src.state());
  for (int i = 0; i < 12; ++i)  // 12 x ~4 examples pass the 38 of an epoch
    EXPECT_EQ(src.next(64).tokens.to_vector(), again.next(64).tokens.to_vector()) << "batch " << i;
  EXPECT_EQ(src.validation(64, 4).size(), 1u);  // the 2 held-out questions fit one sequence

  // Augmentation: each drawn image moved (edges repeated), differently per draw, and still exactly resumable.
  Image row;  // 3 x 1: pixels 10, 20, 30 (grey)
  row.width = 3;
  row.height = 1;
  row.rgb = {10, 10, 10, 20, 20, 20, 30, 30, 30};
  EXPECT_EQ(shifted_image(row, 1, 0).rgb, (std::vector<uint8_t>{10, 10, 10, 10, 10, 10, 20, 20, 20}));
  EXPECT_EQ(shifted_image(row, -1, 5).rgb, (std::vector<uint8_t>{20, 20, 20, 30, 30, 30, 30, 30, 30}));
  ImageTextFileSource plain(dir + "/many.jsonl", c, tok, 5), moved(dir + "/many.jsonl", c, tok, 5, 2);
  const TrainBatch p0 = plain.next(64), m0 = moved.next(64);
  EXPECT_EQ(p0.tokens.to_vector(), m0.tokens.to_vector());    // the same examples in the same order ...
  EXPECT_NE(p0.patches.to_vector(), m0.patches.to_vector());  // ... their images moved
  for (int i = 0; i < 5; ++i) moved.next(64);
  ImageTextFileSource moved_again(dir + "/many.jsonl", c, tok, 5, 2);
  moved_again.restore(moved.state());
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(moved.next(64).patches.to_vector(), moved_again.next(64).patches.to_vector()) << "batch " << i;

  // Bad records: one kFormat error naming the file and line.
  const std::pair<std::string, const char*> bad[] = {
      {R"({"text": "no images"})", "'images' must be a list"},
      {R"({"images": ["img/a.png", "img/a.png"], "text": "one <|image|> marker"})", "1 image marker"},
      {R"({"images": ["https://x.org/a.png"], "text": "x"})", "not fetched"},
      {R"({"images": ["img/a.png"], "prompt": "p?"})", "'answer' is missing"},
      {R"({"images": ["img/a.png"], "text": "x", "answer": "y"})", "not both"},
      {R"({"messages": [{"role": "user", "content": "hi"}]})", "no assistant message"},
      {"[1, 2]", "expected a JSON object"},
      {"{nope", "not valid JSON"},
  };
  for (const auto& [line, want] : bad) {
    std::ofstream(dir + "/bad.jsonl") << R"({"images": ["img/a.png"], "text": "fine"})"
                                      << "\n"
                                      << line << "\n";
    try {
      read_image_text_records(dir + "/bad.jsonl");
      ADD_FAILURE() << "accepted " << line;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
    }
  }
  std::ofstream(dir + "/missing.jsonl") << R"({"images": ["img/none.png"], "text": "x"})"
                                        << "\n";
  EXPECT_THROW(record_example(read_image_text_records(dir + "/missing.jsonl")[0], c, tok), Error);
  EXPECT_TRUE(is_image_text_file(dir + "/many.jsonl"));
  std::ofstream(dir + "/text.jsonl") << R"({"text": "plain"})"
                                     << "\n";
  EXPECT_FALSE(is_image_text_file(dir + "/text.jsonl"));
  std::filesystem::remove_all(dir);
}

// A prepared directory (data/datasets/image_store.h: images decoded once into a store, the records rewritten to refer
// to it) trains exactly as its records do: the same batches (tokens, targets, patches, grids), with augmentation too,
// the same validation, the same resume; the stored pixels are the decoder's. Bad input is one clear error and
// leaves no directory behind.
TEST(ImageText, PreparedDirectoryTrainsExactlyAsItsRecords) {
  const ModelConfig c = vlm_config();
  const Tokenizer& tok = qa_tokenizer();
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("myriad_itp_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/img");
  std::vector<std::string> files;
  for (int i = 0; i < 3; ++i) {
    files.push_back("img/" + std::to_string(i) + ".png");
    write_file_atomic(dir + "/" + files.back(), encode_png(random_image(28 + 7 * i, 28, uint64_t(10 + i))));
  }
  const std::string uri = png_data_uri(random_image(56, 21, 7));
  {
    std::ofstream f(dir + "/data.jsonl");
    for (int i = 0; i < 40; ++i) {
      const std::string& file = files[size_t(i) % files.size()];
      if (i % 3 == 0)
        f << R"({"images": [")" << file << R"(", ")" << uri << R"("], "text": "two <|image|> and <|image|> )" << i
          << R"("})";
      else if (i % 3 == 1)
        f << R"({"images": [")" << file << R"("], "prompt": "what )" << i << R"(?", "answer": ")" << i % 7 << R"("})";
      else
        f << R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ")" << file
          << R"("}}, {"type": "text", "text": "q"}]}, {"role": "assistant", "content": "a )" << i << R"("}]})";
      f << "\n" << (i == 5 ? "\n" : "");  // a blank line, skipped as the reader skips it
    }
  }
  const ImageTextPrepareResult r = prepare_image_text(dir + "/data.jsonl", dir + "/prepared", false);
  EXPECT_EQ(r.records, 40);
  EXPECT_EQ(r.images, 4) << "three files and one data: URI, each stored once";
  EXPECT_EQ(r.references, 40 + 14);
  ASSERT_TRUE(is_prepared_image_text(dir + "/prepared"));
  const ImageStore store = ImageStore::open(dir + "/prepared");
  ASSERT_EQ(store.size(), 4);
  // In order of first use: file 0 and the URI (record 0), then files 1 and 2.
  const Image expect[] = {read_image_file(dir + "/" + files[0]), decode_image(image_bytes_from_url(uri, "uri"), "uri"),
                          read_image_file(dir + "/" + files[1]), read_image_file(dir + "/" + files[2])};
  for (int64_t i = 0; i < 4; ++i) {
    const Image got = store.image(i, "test");
    EXPECT_EQ(got.width, expect[i].width);
    EXPECT_EQ(got.height, expect[i].height);
    EXPECT_EQ(got.rgb, expect[i].rgb) << "image " << i;
  }
  EXPECT_THROW(store.image(4, "test"), Error);

  for (const int64_t shift : {int64_t(0), int64_t(2)}) {
    ImageTextFileSource from_records(dir + "/data.jsonl", c, tok, 9, shift);
    ImageTextFileSource from_store(dir + "/prepared", c, tok, 9, shift);
    ASSERT_EQ(from_store.train_examples(), from_records.train_examples());
    for (int i = 0; i < 14; ++i) {  // past an epoch's end
      const TrainBatch a = from_records.next(96), b = from_store.next(96);
      ASSERT_EQ(a.tokens.to_vector(), b.tokens.to_vector()) << "batch " << i << " shift " << shift;
      EXPECT_EQ(a.targets.to_vector(), b.targets.to_vector()) << "batch " << i;
      EXPECT_EQ(a.patches.to_vector(), b.patches.to_vector()) << "batch " << i << " shift " << shift;
      ASSERT_EQ(a.grids.size(), b.grids.size());
      for (size_t g = 0; g < a.grids.size(); ++g) EXPECT_EQ(a.grids[g].patches(), b.grids[g].patches());
    }
    const std::vector<TrainBatch> va = from_records.validation(96, 4), vb = from_store.validation(96, 4);
    ASSERT_EQ(va.size(), vb.size());
    for (size_t v = 0; v < va.size(); ++v) EXPECT_EQ(va[v].patches.to_vector(), vb[v].patches.to_vector());
    ImageTextFileSource resumed(dir + "/prepared", c, tok, 9, shift);
    resumed.restore(from_store.state());
    EXPECT_EQ(resumed.next(96).patches.to_vector(), from_records.next(96).patches.to_vector());
  }

  // Bad input.
  EXPECT_THROW(prepare_image_text(dir + "/data.jsonl", dir + "/prepared", false), Error) << "not empty, no force";
  EXPECT_NO_THROW(prepare_image_text(dir + "/data.jsonl", dir + "/prepared", true));
  const std::string stored_records = dir + "/prepared/" + kImageTextRecordsFile;
  try {
    prepare_image_text(stored_records, dir + "/again", false);
    ADD_FAILURE() << "prepared records prepared again";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already a stored image"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/again"));
  try {  // the records without their store
    record_example(read_image_text_records(stored_records)[0], c, tok);
    ADD_FAILURE() << "a stored image without its store";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prepared image"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/broken.jsonl") << R"({"images": ["img/0.png"], "text": "fine"})"
                                       << "\n"
                                       << R"({"images": ["img/none.png"], "text": "missing"})"
                                       << "\n";
  try {
    prepare_image_text(dir + "/broken.jsonl", dir + "/broken", false);
    ADD_FAILURE() << "a missing image";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.jsonl:2: image 0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/broken"));
  std::ofstream(dir + "/corrupt.png") << "\x89PNG\r\n\x1a\n but nothing more";
  std::ofstream(dir + "/corrupt.jsonl") << R"({"images": ["corrupt.png"], "text": "x"})"
                                        << "\n";
  EXPECT_THROW(prepare_image_text(dir + "/corrupt.jsonl", dir + "/corrupt", false), Error);
  EXPECT_FALSE(std::filesystem::exists(dir + "/corrupt"));
  // A store whose tensor is not an image.
  save_safetensors(dir + "/prepared/" + kImageStoreFile, {{"image.0", Tensor::zeros({2, 2})}},
                   {{"format", "myriad-image-store"}});
  EXPECT_THROW(ImageStore::open(dir + "/prepared"), Error);
  std::filesystem::remove_all(dir);
}

// The answers evaluate_image_questions generates (a batch of questions, one call of the tower, batched decode)
// are those the serving engine generates for each question alone; an answer counts when it equals the truth.
TEST(ImageText, GeneratedAnswersAreTheEnginesAndScoredByExactMatch) {
  ModelConfig c = vlm_config();
  const Tokenizer& tok = qa_tokenizer();
  c.vocab_size = tok.vocab_size();
  auto w = std::make_shared<ModelWeights>(ModelWeights::random(c, 8));
  auto model = std::make_shared<InferenceModel>(c, DecodeWeights::from_model(*w), tok);
  model->set_vision_weights(w);
  std::vector<ImageTextExample> examples;
  const char* prompts[] = {"how many circles?", "what colour is the square?", "where is the triangle?",
                           "how many squares?", "what shape is red?",         "which one?"};
  for (uint32_t i = 0; i < 6; ++i)
    examples.push_back(question_example({random_image(28 + 28 * (i % 2), 28, 10 + i)}, prompts[i], "x",
                                        i % 2 ? "odd" : "even", c, tok));
  Engine engine(model);
  std::vector<std::string> engine_text;
  for (const ImageTextExample& e : examples) {
    GenerationRequest g;
    g.prompt.assign(e.tokens.begin(), e.tokens.begin() + e.prompt_tokens);
    g.image_patches = e.images.patches(*c.vision_config);
    g.image_grids = e.images.grids;
    g.max_tokens = 3;
    g.sampling.temperature = 0;
    g.stop = {"\n"};
    std::vector<int32_t> ids;  // decoded as the evaluator decodes (bytes that are not UTF-8 replaced)
    engine.submit(g, [&](const TokenEvent& ev) {
      if (ev.token >= 0) ids.push_back(ev.token);
    });
    engine.run_until_idle();
    const std::string text = tok.decode(ids);
    engine_text.push_back(text.substr(0, text.find('\n')));
  }
  // The truth: the engine's answer for questions 0, 2, 4 (when not blank), something else for the rest.
  int64_t expect_right = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const size_t b = engine_text[i].find_first_not_of(" \t\r"), e = engine_text[i].find_last_not_of(" \t\r");
    const std::string trimmed = b == std::string::npos ? "" : engine_text[i].substr(b, e - b + 1);
    const bool use = i % 2 == 0 && !trimmed.empty();
    examples[i].answer = use ? trimmed : "\x01never";
    expect_right += use;
  }
  ImageQuestionOptions o;
  o.max_new_tokens = 3;
  o.batch = 4;  // two batches, the second partly filled
  o.keep_samples = 6;
  const ImageQuestionReport r = evaluate_image_questions(*model, tok, examples, o);
  ASSERT_EQ(r.samples.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const size_t b = engine_text[i].find_first_not_of(" \t\r"), e = engine_text[i].find_last_not_of(" \t\r");
    EXPECT_EQ(r.samples[i].got, b == std::string::npos ? "" : engine_text[i].substr(b, e - b + 1)) << i;
    EXPECT_EQ(r.samples[i].prompt, prompts[i]);
  }
  EXPECT_EQ(r.all.total, 6);
  EXPECT_EQ(r.all.right, expect_right);
  EXPECT_EQ(r.by_type.at("odd").right, 0);
  EXPECT_EQ(r.by_type.at("even").total, 3);
}

}  // namespace
}  // namespace myriad
