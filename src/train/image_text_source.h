// Training batches of images and text for a vision-language model (issue 14). An example is a record's tokens
// with each image's run of placeholders (vision_tokens(grid) copies of media_placeholder_token_id) and which
// tokens are targets:
//
//   question  <image tokens> PROMPT " " ANSWER <|endoftext|>      the answer and its end are predicted
//   caption   <image tokens> TEXT <|endoftext|>                   the text and its end are predicted
//   chat      the chat template's tokens, images where they stand  the assistant's turns are predicted
//
// (images at the record's markers, else first; text encoded as text: special-token text is never parsed). Image
// tokens and prompts are never predicted. Examples are packed whole into sequences of seq_len (several per
// sequence; the rest padded with <|endoftext|> and ignored); one longer than seq_len is a kConfig error naming
// both lengths. Two sources:
//   ShapeSceneSource      the built-in shape scenes (data/datasets/shape_images.h), one question per scene in turn over
//                         its families; train and held-out scenes from disjoint seeds (split_seed); state: the
//                         next train scene.
//   ImageTextFileSource   the records of an image-text JSONL file (data/datasets/image_text_records.h), every image
//   decoded
//                         and patched once when the source is made (held in memory, never decoded per step); or
//                         of a prepared directory (data/datasets/image_store.h), whose images are never decoded: a
//                         training example's patches are made from the mapped store when it is drawn; the last records
//                         are held out for validation (1 in 20, at most 256, none under 20 records); each epoch in its
//                         own order from the seed; state: epoch and position. With shift > 0 each training image is
//                         moved by a random offset of up to shift pixels per axis each time it is drawn (augmentation;
//                         the offset a function of the seed, epoch and position).
// Both resume exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/datasets/image_store.h"
#include "data/datasets/image_text_records.h"
#include "data/datasets/shape_images.h"
#include "data/tokenize/tokenizer.h"
#include "infer/image_input.h"
#include "model/config.h"
#include "train/trainer.h"

namespace myriad {

struct ImageTextExample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> predicted;  // per token: 1 when it is a target (predicted from the token before it)
  ImageInput images;
  // A question's: the tokens before its answer (what evaluation prompts with), its answer and type.
  int64_t prompt_tokens = 0;
  std::string answer, type;
};

// A question about images: <image tokens> PROMPT " " ANSWER <|endoftext|>, the images at `marker`s of the prompt or
// first. Throws kValue when the markers and images disagree in number, kConfig for a model without a vision tower.
ImageTextExample question_example(const std::vector<Image>& images, const std::string& prompt,
                                  const std::string& answer, const std::string& type, const ModelConfig& config,
                                  const Tokenizer& tok, const std::string& marker = "<|image|>");

// A record as an example, its images read (load_record_image) and patched (the decoded images also into `images`
// when given). kFormat naming the record's place for an image that cannot be read.
// The same with the media already patched (images, videos: infer/image_input.h), one marker per image or video.
ImageTextExample media_question_example(ImageInput media, const std::string& prompt, const std::string& answer,
                                        const std::string& type, const ModelConfig& config, const Tokenizer& tok,
                                        const std::string& marker = "<|image|>");

ImageTextExample record_example(const ImageTextRecord& r, const ModelConfig& config, const Tokenizer& tok,
                                std::vector<Image>* images = nullptr, const ImageStore* store = nullptr);

// The image moved by (dx, dy) pixels, the same size: out(x, y) = in(x - dx, y - dy), edge pixels repeated.
Image shifted_image(const Image& image, int64_t dx, int64_t dy);

// The image marker of a model's records: its config's image_placeholder, else "<|image|>".
std::string image_marker(const ModelConfig& config);

// Packs examples drawn by `draw(peek)` (which advances past the example when peek is false; null: none left) into
// one sequence of seq_len; at least one example must be drawn.
TrainBatch pack_image_text(int64_t seq_len, int32_t pad, int64_t patch_row,
                           const std::function<const ImageTextExample*(bool peek)>& draw);

// Questions made on the fly from seeds (the built-in sets): example(seed, question) for train seeds split_seed(false,
// i) and held-out ones split_seed(true, i), packed several per sequence; the state is the next train index, under
// `state_key`.
class GeneratedQuestionSource : public BatchSource {
 public:
  // The model config's vision_config gives the patching; the tokenizer encodes the text (its <|endoftext|>).
  GeneratedQuestionSource(const ModelConfig& config, const Tokenizer& tok, std::string state_key);

  virtual ImageTextExample example(uint64_t seed, uint64_t question) const = 0;
  TrainBatch next(int64_t seq_len) override;
  nlohmann::json state() const override { return {{state_key_, next_}}; }
  void restore(const nlohmann::json& state) override;
  std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) override;
  int64_t target_bytes(const TrainBatch& b) const override;

 protected:
  const ModelConfig& config_;
  const Tokenizer& tok_;

 private:
  std::string state_key_;
  int32_t end_of_text_ = 0;
  uint64_t next_ = 0;  // train examples used so far
};

// The built-in shape scenes (data/datasets/shape_images.h), one question per scene.
class ShapeSceneSource final : public GeneratedQuestionSource {
 public:
  ShapeSceneSource(const ModelConfig& config, const Tokenizer& tok, int64_t image_size = 56);
  ImageTextExample example(uint64_t scene_seed, uint64_t question) const override;

 private:
  int64_t image_size_;
};

// The built-in motion clips (data/datasets/motion_clips.h): each clip a video question ("which way does the square
// move?", "what colour is the square?"), the clip's frames in chunks of init_pos_emb_time.
class MotionClipSource final : public GeneratedQuestionSource {
 public:
  MotionClipSource(const ModelConfig& config, const Tokenizer& tok, int64_t size = 56, int64_t frames = 4);
  ImageTextExample example(uint64_t clip_seed, uint64_t question) const override;

 private:
  int64_t size_, frames_;
};

class ImageTextFileSource final : public BatchSource {
 public:
  ImageTextFileSource(const std::string& path, const ModelConfig& config, const Tokenizer& tok, uint64_t seed,
                      int64_t shift = 0);

  TrainBatch next(int64_t seq_len) override;
  nlohmann::json state() const override { return {{"epoch", epoch_}, {"position", position_}}; }
  void restore(const nlohmann::json& state) override;
  std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) override;
  int64_t target_bytes(const TrainBatch& b) const override;
  size_t train_examples() const { return train_.size(); }
  const std::vector<ImageTextExample>& held_out() const { return held_out_; }

 private:
  void shuffle_epoch();  // order_ for epoch_
  const Tokenizer& tok_;
  const VisionConfig vision_;
  int64_t shift_ = 0;
  std::vector<std::vector<Image>> train_images_;  // with shift (and no store): each training example's decoded images
  std::optional<ImageStore> store_;               // a prepared directory's images (data/datasets/image_store.h)
  std::vector<std::vector<int64_t>> stored_;      // with store_: each training example's images in it
  ImageTextExample augmented_;                    // with shift: the example drawn last, its images moved
  std::pair<uint64_t, uint64_t> augmented_at_ = {~0ull, ~0ull};  // its (epoch, position)
  int64_t patch_row_ = 0;
  int32_t end_of_text_ = 0;
  uint64_t seed_ = 0;
  std::vector<ImageTextExample> train_, held_out_;
  std::vector<size_t> order_;
  uint64_t epoch_ = 0, position_ = 0;
};

}  // namespace myriad
