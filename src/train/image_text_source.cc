// Shape-scene question answering as training batches (see image_text_source.h).
#include "train/image_text_source.h"

#include "core/error.h"
#include "infer/image_input.h"

namespace myriad {

namespace {
constexpr uint64_t kValidationScenes = 64;  // fixed held-out scenes the validation batches draw from
}

ShapeSceneSource::ShapeSceneSource(const ModelConfig& config, const Tokenizer& tok, int64_t image_size)
    : config_(config), tok_(tok), image_size_(image_size) {
  MYRIAD_REQUIRE(config.vision_config.has_value() && config.media_placeholder_token_id.has_value(), kConfig,
                 "image training needs a model with a vision tower: its config needs vision_config and "
                 "media_placeholder_token_id");
  patching_ = patch_options_for(*config.vision_config);
  placeholder_ = int32_t(*config.media_placeholder_token_id);
  end_of_text_ = tok.end_of_text_id();
  MYRIAD_REQUIRE(end_of_text_ >= 0, kConfig, "image training: the tokenizer has no end-of-text token");
}

ImageTextExample ShapeSceneSource::example(uint64_t scene_seed, uint64_t question) const {
  const ShapeScene scene = make_shape_scene(scene_seed, image_size_);
  ImageTextExample e;
  e.question = scene.questions[size_t(question % scene.questions.size())];
  e.patches = image_to_patches(scene.image, patching_);
  const int64_t n = vision_tokens(*config_.vision_config, {e.patches.grid_h, e.patches.grid_w});
  e.tokens.assign(size_t(n), placeholder_);
  for (int32_t t : tok_.encode(e.question.question, Specials::kAsText)) e.tokens.push_back(t);
  e.answer_begin = int64_t(e.tokens.size());
  for (int32_t t : tok_.encode(" " + e.question.answer, Specials::kAsText)) e.tokens.push_back(t);
  e.tokens.push_back(end_of_text_);
  return e;
}

template <class Draw>
TrainBatch ShapeSceneSource::pack(int64_t seq_len, Draw&& draw) const {
  std::vector<int64_t> tokens, targets;
  std::vector<float> patches;
  TrainBatch b;
  while (true) {
    const ImageTextExample e = draw(/*peek=*/true);
    const int64_t n = int64_t(e.tokens.size());
    MYRIAD_REQUIRE(n <= seq_len, kConfig, "image training: one example takes ", n, " tokens (its image ",
                   e.patches.grid_h, " x ", e.patches.grid_w, " patches), more than the stage's seq_len ", seq_len);
    if (int64_t(tokens.size()) + n > seq_len) break;
    draw(/*peek=*/false);
    for (int64_t i = 0; i < n; ++i) {
      tokens.push_back(e.tokens[size_t(i)]);
      // Position i predicts token i + 1: counted when that token is part of the answer (or its end of text).
      targets.push_back(i + 1 >= e.answer_begin && i + 1 < n ? e.tokens[size_t(i + 1)] : -100);
    }
    patches.insert(patches.end(), e.patches.values.begin(), e.patches.values.end());
    b.grids.push_back({e.patches.grid_h, e.patches.grid_w});
  }
  while (int64_t(tokens.size()) < seq_len) {
    tokens.push_back(end_of_text_);
    targets.push_back(-100);
  }
  const int64_t row = 3 * patching_.patch_size * patching_.patch_size, L = int64_t(patches.size()) / row;
  b.tokens = Tensor::from_vector(tokens, {seq_len});
  b.targets = Tensor::from_vector(targets, {seq_len});
  b.patches = Tensor::from_vector(patches, {L, row});
  return b;
}

TrainBatch ShapeSceneSource::next(int64_t seq_len) {
  return pack(seq_len, [&](bool peek) {
    const ImageTextExample e = example(split_seed(false, next_), next_);
    if (!peek) ++next_;
    return e;
  });
}

void ShapeSceneSource::restore(const nlohmann::json& state) {
  MYRIAD_REQUIRE(state.is_object() && state.contains("next_scene") && state["next_scene"].is_number_unsigned(), kFormat,
                 "image training: the data state must be {\"next_scene\": N}, got ", state.dump());
  next_ = state["next_scene"].get<uint64_t>();
}

std::vector<TrainBatch> ShapeSceneSource::validation(int64_t seq_len, int64_t max_batches) {
  std::vector<TrainBatch> out;
  uint64_t i = 0;
  for (int64_t k = 0; k < max_batches && i < kValidationScenes; ++k)
    out.push_back(pack(seq_len, [&](bool peek) {
      const ImageTextExample e = example(split_seed(true, i % kValidationScenes), i);
      if (!peek) ++i;
      return e;
    }));
  return out;
}

int64_t ShapeSceneSource::target_bytes(const TrainBatch& b) const {
  return target_token_bytes(b, tok_);
}

}  // namespace myriad
