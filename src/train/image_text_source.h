// Training batches of images and questions for a vision-language model (issue 14): the built-in shape scenes
// (data/shape_images.h), each as
//
//   <image tokens> QUESTION " " ANSWER <|endoftext|>
//
// where the image tokens are vision_tokens(grid) copies of media_placeholder_token_id, the question and the
// answer are encoded as text (special-token text never parsed), and the targets are the answer's tokens and the
// end of text only (the model is never asked to predict image tokens or the question). Examples are packed into
// sequences of seq_len (several images per sequence; the rest padded with <|endoftext|> and ignored); an
// example longer than seq_len is a kConfig error naming both lengths. One question per scene, in turn over the
// scene's families. Train scenes and held-out scenes come from disjoint seeds (split_seed); the validation
// batches are fixed held-out scenes. The state is the next train scene's index: resumes are exact.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/image.h"
#include "data/shape_images.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "train/trainer.h"

namespace myriad {

// One scene's example: tokens with its placeholders, the answer's span, the image's patches.
struct ImageTextExample {
  std::vector<int32_t> tokens;
  int64_t answer_begin = 0;  // tokens[answer_begin..] are the answer and the end of text (the targets)
  ImagePatches patches;
  ShapeQuestion question;
};

class ShapeSceneSource final : public BatchSource {
 public:
  // The model config's vision_config gives the patching; the tokenizer encodes the text (its <|endoftext|>).
  ShapeSceneSource(const ModelConfig& config, const Tokenizer& tok, int64_t image_size = 56);

  ImageTextExample example(uint64_t scene_seed, uint64_t question) const;
  TrainBatch next(int64_t seq_len) override;
  nlohmann::json state() const override { return {{"next_scene", next_}}; }
  void restore(const nlohmann::json& state) override;
  std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) override;
  int64_t target_bytes(const TrainBatch& b) const override;

 private:
  // Packs examples drawn by `draw` (which advances its own counter) into one sequence of seq_len.
  template <class Draw>
  TrainBatch pack(int64_t seq_len, Draw&& draw) const;

  const ModelConfig& config_;
  const Tokenizer& tok_;
  int64_t image_size_;
  PatchOptions patching_;
  int32_t placeholder_ = 0, end_of_text_ = 0;
  uint64_t next_ = 0;  // train scenes used so far
};

}  // namespace myriad
