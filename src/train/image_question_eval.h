// Evaluation of a vision-language model by the answers it GENERATES (issue 14: MNIST's "which digit is this?",
// the shape scenes' questions, any image-text file's questions): each question's prompt (its image tokens and
// text) is prefilled with the images placed, then the model decodes greedily until <|endoftext|>, a line break or
// max_new_tokens; the answer is right when the generated text, trimmed of surrounding whitespace, equals the
// record's answer exactly. Questions are run in batches: one call of the vision tower per batch, prefill and
// decode batched over the questions. Accuracy per question type and overall.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "data/tokenize/tokenizer.h"
#include "infer/inference_model.h"
#include "train/image_text_source.h"

namespace myriad {

struct ImageQuestionReport {
  struct Count {
    int64_t right = 0, total = 0;
    double accuracy() const { return total ? double(right) / double(total) : 0.0; }
  };
  std::map<std::string, Count> by_type;  // "" for questions without a type
  Count all;
  struct Sample {
    std::string prompt, got, want, type;
  };
  std::vector<Sample> samples;  // the first ones, for a person to read
  double seconds = 0;
  int64_t generated_tokens = 0;
  // {"accuracy", "questions", "types": {type: {"accuracy", "right", "total"}}, "samples": [...], "seconds"}
  nlohmann::json to_json() const;
};

struct ImageQuestionOptions {
  int max_new_tokens = 8;
  int64_t batch = 32;        // questions per batch
  int64_t keep_samples = 8;  // samples kept for the report
};

// The questions among `examples` (those with an answer); kValue when there are none or the model has no vision
// tower.
ImageQuestionReport evaluate_image_questions(const InferenceModel& model, const Tokenizer& tok,
                                             std::span<const ImageTextExample> examples,
                                             const ImageQuestionOptions& o = {});

}  // namespace myriad
