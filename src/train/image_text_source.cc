// Image-text examples and their batch sources (see image_text_source.h).
#include "train/image_text_source.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>

#include "core/error.h"
#include "data/datasets/motion_clips.h"

namespace myriad {

namespace {

constexpr uint64_t kValidationScenes = 64;  // fixed held-out scenes the validation batches draw from

int32_t end_of_text(const Tokenizer& tok) {
  const int32_t eot = tok.end_of_text_id();
  MYRIAD_REQUIRE(eot >= 0, kConfig, "image training: the tokenizer has no end-of-text token");
  return eot;
}

void append_text(ImageTextExample& e, const std::string& text, bool predicted, const Tokenizer& tok) {
  for (int32_t t : tok.encode(text, Specials::kAsText)) {
    e.tokens.push_back(t);
    e.predicted.push_back(predicted ? 1 : 0);
  }
}

void append_image(ImageTextExample& e, size_t image, int32_t placeholder) {
  e.tokens.insert(e.tokens.end(), size_t(e.images.tokens[image]), placeholder);
  e.predicted.resize(e.tokens.size(), 0);
}

// Text with the images at its markers (or all images first when it has none).
void append_marked(ImageTextExample& e, const std::string& text, const std::string& marker, bool predicted,
                   int32_t placeholder, const Tokenizer& tok) {
  const std::vector<std::string> pieces = split_at_markers(text, marker);
  const size_t images = e.images.tokens.size();  // images and videos (a video has several grids)
  MYRIAD_REQUIRE(pieces.size() == 1 || pieces.size() - 1 == images, kValue, pieces.size() - 1, " image marker",
                 pieces.size() == 2 ? "" : "s", " (", marker, ") but ", images, " image", images == 1 ? "" : "s");
  if (pieces.size() == 1)
    for (size_t i = 0; i < images; ++i) append_image(e, i, placeholder);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) append_image(e, i - 1, placeholder);
    append_text(e, pieces[i], predicted, tok);
  }
}

int32_t placeholder_of(const ModelConfig& config) {
  require_vision(config, "image training");
  return int32_t(*config.media_placeholder_token_id);
}

}  // namespace

std::string image_marker(const ModelConfig& config) {
  return config.image_placeholder.value_or("<|image|>");
}

ImageTextExample question_example(const std::vector<Image>& images, const std::string& prompt,
                                  const std::string& answer, const std::string& type, const ModelConfig& config,
                                  const Tokenizer& tok, const std::string& marker) {
  placeholder_of(config);
  ImageInput media;
  for (const Image& im : images) add_image(media, *config.vision_config, im);
  return media_question_example(std::move(media), prompt, answer, type, config, tok, marker);
}

ImageTextExample media_question_example(ImageInput media, const std::string& prompt, const std::string& answer,
                                        const std::string& type, const ModelConfig& config, const Tokenizer& tok,
                                        const std::string& marker) {
  const int32_t ph = placeholder_of(config);
  ImageTextExample e;
  e.images = std::move(media);
  append_marked(e, prompt, marker, false, ph, tok);
  e.prompt_tokens = int64_t(e.tokens.size());
  append_text(e, " " + answer, true, tok);
  e.tokens.push_back(end_of_text(tok));
  e.predicted.push_back(1);
  e.answer = answer;
  e.type = type;
  return e;
}

Image shifted_image(const Image& image, int64_t dx, int64_t dy) {
  Image out = image;
  for (int64_t y = 0; y < image.height; ++y)
    for (int64_t x = 0; x < image.width; ++x) {
      const int64_t sx = std::clamp<int64_t>(x - dx, 0, image.width - 1),
                    sy = std::clamp<int64_t>(y - dy, 0, image.height - 1);
      for (int64_t ch = 0; ch < 3; ++ch)
        out.rgb[size_t((y * image.width + x) * 3 + ch)] = image.rgb[size_t((sy * image.width + sx) * 3 + ch)];
    }
  return out;
}

namespace {

// A record's example with its media already made (patched, or only sized: grids and tokens without values).
ImageTextExample example_of(const ImageTextRecord& r, ImageInput media, const ModelConfig& config,
                            const Tokenizer& tok);

}  // namespace

ImageTextExample record_example(const ImageTextRecord& r, const ModelConfig& config, const Tokenizer& tok,
                                std::vector<Image>* decoded, const ImageStore* store) {
  std::vector<Image> images;
  for (size_t k = 0; k < r.images.size(); ++k) {
    try {
      images.push_back(load_record_image(r.images[k], str(r.where, ": image ", k), {}, store));
    } catch (const Error& e) {
      throw_error(ErrorKind::kFormat, r.where, ": image ", k, ": ", e.what());
    }
  }
  if (decoded) *decoded = images;
  ImageInput media;
  for (const Image& im : images) add_image(media, *config.vision_config, im);
  for (size_t k = 0; k < r.videos.size(); ++k) {
    try {
      add_video(media, *config.vision_config, load_record_video(r.videos[k], str(r.where, ": video ", k)));
    } catch (const Error& e) {
      throw_error(ErrorKind::kFormat, r.where, ": video ", k, ": ", e.what());
    }
  }
  return example_of(r, std::move(media), config, tok);
}

namespace {

ImageTextExample example_of(const ImageTextRecord& r, ImageInput media, const ModelConfig& config,
                            const Tokenizer& tok) {
  const int32_t ph = placeholder_of(config);
  if (r.kind == ImageTextRecord::Kind::kQuestion)
    return media_question_example(std::move(media), r.prompt, r.answer, r.type, config, tok, image_marker(config));
  ImageTextExample e;
  e.images = std::move(media);
  if (r.kind == ImageTextRecord::Kind::kCaption) {
    append_marked(e, r.text, image_marker(config), true, ph, tok);
    e.tokens.push_back(end_of_text(tok));
    e.predicted.push_back(1);
    return e;
  }
  // A chat: the template's tokens (one image token per image where it stands), each expanded to the image's run.
  const ChatTokens chat = encode_chat(tok, r.messages, {}, /*generation_prompt=*/false, ToolChoice::kAuto, ph);
  size_t image = 0;
  for (size_t i = 0; i < chat.ids.size(); ++i) {
    if (chat.ids[i] == ph) {
      append_image(e, image++, ph);
      continue;
    }
    e.tokens.push_back(chat.ids[i]);
    e.predicted.push_back(chat.assistant[i]);
  }
  return e;
}

}  // namespace

TrainBatch pack_image_text(int64_t seq_len, int32_t pad, int64_t patch_row,
                           const std::function<const ImageTextExample*(bool peek)>& draw) {
  std::vector<int64_t> tokens, targets;
  std::vector<float> patches;
  TrainBatch b;
  for (const ImageTextExample* e; (e = draw(/*peek=*/true)) != nullptr;) {
    const int64_t n = int64_t(e->tokens.size());
    int64_t image_tokens = 0;
    for (int64_t t : e->images.tokens) image_tokens += t;
    MYRIAD_REQUIRE(n <= seq_len, kConfig, "image training: one example takes ", n, " tokens (", image_tokens,
                   " of them for its images), more than the stage's seq_len ", seq_len);
    if (int64_t(tokens.size()) + n > seq_len) break;
    draw(/*peek=*/false);
    for (int64_t i = 0; i < n; ++i) {
      tokens.push_back(e->tokens[size_t(i)]);
      // Position i predicts token i + 1: counted when that token is a target.
      targets.push_back(i + 1 < n && e->predicted[size_t(i + 1)] ? e->tokens[size_t(i + 1)] : -100);
    }
    patches.insert(patches.end(), e->images.values.begin(), e->images.values.end());
    b.grids.insert(b.grids.end(), e->images.grids.begin(), e->images.grids.end());
  }
  MYRIAD_REQUIRE(!tokens.empty(), kValue, "image training: no example to pack");
  while (int64_t(tokens.size()) < seq_len) {
    tokens.push_back(pad);
    targets.push_back(-100);
  }
  b.tokens = Tensor::from_vector(tokens, {seq_len});
  b.targets = Tensor::from_vector(targets, {seq_len});
  b.patches = Tensor::from_vector(patches, {int64_t(patches.size()) / patch_row, patch_row});
  return b;
}

// ---- questions made from seeds (the built-in sets) -------------------------------------------------------------

GeneratedQuestionSource::GeneratedQuestionSource(const ModelConfig& config, const Tokenizer& tok, std::string state_key)
    : config_(config), tok_(tok), state_key_(std::move(state_key)) {
  MYRIAD_REQUIRE(config.vision_config.has_value() && config.media_placeholder_token_id.has_value(), kConfig,
                 "image training needs a model with a vision tower: its config needs vision_config and "
                 "media_placeholder_token_id");
  end_of_text_ = end_of_text(tok);
}

namespace {

// draw() for pack_image_text over examples made on the fly: example(i) for i = counter, counter + 1, ...
template <class Make>
std::function<const ImageTextExample*(bool)> drawing(uint64_t& counter, Make make) {
  auto cur = std::make_shared<std::optional<std::pair<uint64_t, ImageTextExample>>>();
  return [&counter, make, cur](bool peek) -> const ImageTextExample* {
    if (!*cur || (*cur)->first != counter) *cur = std::make_pair(counter, make(counter));
    const ImageTextExample* e = &(*cur)->second;
    if (!peek) ++counter;
    return e;
  };
}

}  // namespace

TrainBatch GeneratedQuestionSource::next(int64_t seq_len) {
  const int64_t row = 3 * config_.vision_config->patch_size * config_.vision_config->patch_size;
  return pack_image_text(seq_len, end_of_text_, row,
                         drawing(next_, [this](uint64_t i) { return example(split_seed(false, i), i); }));
}

void GeneratedQuestionSource::restore(const nlohmann::json& state) {
  MYRIAD_REQUIRE(state.is_object() && state.contains(state_key_) && state[state_key_].is_number_unsigned(), kFormat,
                 "image training: the data state must be {\"", state_key_, "\": N}, got ", state.dump());
  next_ = state[state_key_].get<uint64_t>();
}

std::vector<TrainBatch> GeneratedQuestionSource::validation(int64_t seq_len, int64_t max_batches) {
  const int64_t row = 3 * config_.vision_config->patch_size * config_.vision_config->patch_size;
  std::vector<TrainBatch> out;
  uint64_t i = 0;
  const auto draw = drawing(i, [this](uint64_t k) { return example(split_seed(true, k % kValidationScenes), k); });
  for (int64_t k = 0; k < max_batches && i < kValidationScenes; ++k)
    out.push_back(pack_image_text(seq_len, end_of_text_, row, draw));
  return out;
}

int64_t GeneratedQuestionSource::target_bytes(const TrainBatch& b) const {
  return target_token_bytes(b, tok_);
}

// ---- the built-in shape scenes and motion clips ---------------------------------------------------------------------

ShapeSceneSource::ShapeSceneSource(const ModelConfig& config, const Tokenizer& tok, int64_t image_size)
    : GeneratedQuestionSource(config, tok, "next_scene"), image_size_(image_size) {}

ImageTextExample ShapeSceneSource::example(uint64_t scene_seed, uint64_t question) const {
  const ShapeScene scene = make_shape_scene(scene_seed, image_size_);
  const ShapeQuestion& q = scene.questions[size_t(question % scene.questions.size())];
  return question_example({scene.image}, q.question, q.answer, q.family, config_, tok_);
}

MotionClipSource::MotionClipSource(const ModelConfig& config, const Tokenizer& tok, int64_t size, int64_t frames)
    : GeneratedQuestionSource(config, tok, "next_clip"), size_(size), frames_(frames) {}

ImageTextExample MotionClipSource::example(uint64_t clip_seed, uint64_t question) const {
  const MotionClip clip = make_motion_clip(clip_seed, size_, frames_);
  const ShapeQuestion& q = clip.questions[size_t(question % clip.questions.size())];
  ImageInput media;
  add_video(media, *config_.vision_config, clip.video);
  return media_question_example(std::move(media), q.question, q.answer, q.family, config_, tok_);
}

// ---- image-text files ---------------------------------------------------------------------------------------------

ImageTextFileSource::ImageTextFileSource(const std::string& path, const ModelConfig& config, const Tokenizer& tok,
                                         uint64_t seed, int64_t shift)
    : tok_(tok), vision_((placeholder_of(config), *config.vision_config)), shift_(shift), seed_(seed) {
  MYRIAD_REQUIRE(shift >= 0, kValue, "image training: shift ", shift, " must be >= 0");
  end_of_text_ = end_of_text(tok);
  patch_row_ = 3 * config.vision_config->patch_size * config.vision_config->patch_size;
  std::string records_path = path;
  if (is_prepared_image_text(path)) {
    store_.emplace(ImageStore::open(path));
    records_path = (std::filesystem::path(path) / kImageTextRecordsFile).string();
  }
  const std::vector<ImageTextRecord> records = read_image_text_records(records_path, image_marker(config));
  const size_t held = records.size() >= 20 ? std::min<size_t>(256, records.size() / 20) : 0;
  const size_t n_train = records.size() - held;
  std::vector<ImageTextExample> all;
  for (size_t i = 0; i < records.size(); ++i) {
    const ImageTextRecord& r = records[i];
    const bool train = i < n_train;
    if (store_) {
      // A training example keeps its images' places in the store; its patches are made when it is drawn.
      if (train) {
        stored_.emplace_back();
        for (size_t k = 0; k < r.images.size(); ++k) {
          const int64_t s = stored_image_index(r.images[k], str(r.where, ": image ", k));
          MYRIAD_REQUIRE(s >= 0, kFormat, r.where, ": image ", k, ": a prepared directory's records refer to its store",
                         " only (stored:N), got '", r.images[k], "'");
          stored_.back().push_back(s);
        }
      }
    } else if (shift_ > 0 && train) {
      train_images_.emplace_back();
    }
    if (store_ && train) {
      // Only sized: the placeholder runs from the stored images' sizes (patch_grid_for, as patching sizes them);
      // the patches are made at the draw. Memory and start-up time stay O(tokens).
      ImageInput sized;
      for (size_t k = 0; k < stored_.back().size(); ++k) {
        const ImageSize size = store_->size_of(stored_.back()[k], str(r.where, ": image ", k));
        PatchGrid g;
        patch_grid_for(size.width, size.height, patch_options_for(vision_), &g.h, &g.w);
        sized.grids.push_back(g);
        sized.tokens.push_back(vision_tokens(vision_, g));
      }
      all.push_back(example_of(r, std::move(sized), config, tok));
      continue;
    }
    // Shifts move images only: an example with a video keeps its patches as made (train_images_ left empty).
    const bool shifted = !store_ && shift_ > 0 && train && r.videos.empty();
    all.push_back(
        record_example(r, config, tok, shifted ? &train_images_.back() : nullptr, store_ ? &*store_ : nullptr));
  }
  held_out_.assign(std::make_move_iterator(all.end() - ptrdiff_t(held)), std::make_move_iterator(all.end()));
  all.resize(n_train);
  train_ = std::move(all);
  shuffle_epoch();
}

void ImageTextFileSource::shuffle_epoch() {
  order_.resize(train_.size());
  std::iota(order_.begin(), order_.end(), size_t(0));
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + epoch_);
  std::shuffle(order_.begin(), order_.end(), rng);
}

TrainBatch ImageTextFileSource::next(int64_t seq_len) {
  return pack_image_text(seq_len, end_of_text_, patch_row_, [this](bool peek) {
    if (position_ >= order_.size()) {
      ++epoch_;
      position_ = 0;
      shuffle_epoch();
    }
    const size_t k = order_[position_];
    const ImageTextExample* e = &train_[k];
    // Patches made at the draw: images from the store, or moved ones (shift).
    const bool remade = store_ ? !stored_[k].empty() : shift_ > 0 && !train_images_[k].empty();
    if (remade && augmented_at_ != std::make_pair(epoch_, position_)) {
      // The drawn example with its images made, once per draw (a peek and the take share it).
      augmented_at_ = {epoch_, position_};
      std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull ^ (epoch_ << 32) ^ position_);
      std::uniform_int_distribution<int64_t> offset(-shift_, shift_);
      augmented_ = *e;
      augmented_.images = ImageInput();
      const size_t count = store_ ? stored_[k].size() : train_images_[k].size();
      for (size_t j = 0; j < count; ++j) {
        const Image im = store_ ? store_->image(stored_[k][j], "image training") : train_images_[k][j];
        if (shift_ > 0) {
          const int64_t dx = offset(rng), dy = offset(rng);
          add_image(augmented_.images, vision_, shifted_image(im, dx, dy));
        } else {
          add_image(augmented_.images, vision_, im);
        }
      }
    }
    if (remade) e = &augmented_;
    if (!peek) ++position_;
    return e;
  });
}

void ImageTextFileSource::restore(const nlohmann::json& s) {
  MYRIAD_REQUIRE(s.is_object() && s.contains("epoch") && s["epoch"].is_number_unsigned() && s.contains("position") &&
                     s["position"].is_number_unsigned() && s["position"].get<uint64_t>() <= train_.size(),
                 kFormat, "image training: the data state must be {\"epoch\": E, \"position\": P} with P at most ",
                 train_.size(), ", got ", s.dump());
  epoch_ = s["epoch"].get<uint64_t>();
  position_ = s["position"].get<uint64_t>();
  shuffle_epoch();
}

std::vector<TrainBatch> ImageTextFileSource::validation(int64_t seq_len, int64_t max_batches) {
  std::vector<TrainBatch> out;
  size_t i = 0;
  const auto draw = [&](bool peek) -> const ImageTextExample* {
    if (i >= held_out_.size()) return nullptr;
    return &held_out_[peek ? i : i++];
  };
  for (int64_t k = 0; k < max_batches && i < held_out_.size(); ++k)
    out.push_back(pack_image_text(seq_len, end_of_text_, patch_row_, draw));
  return out;
}

int64_t ImageTextFileSource::target_bytes(const TrainBatch& b) const {
  return target_token_bytes(b, tok_);
}

}  // namespace myriad
