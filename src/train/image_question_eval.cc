// Image questions answered by generation: see image_question_eval.h.
#include "train/image_question_eval.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace myriad {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

nlohmann::json ImageQuestionReport::to_json() const {
  nlohmann::json j = {{"accuracy", all.accuracy()},
                      {"questions", all.total},
                      {"right", all.right},
                      {"seconds", seconds},
                      {"generated_tokens", generated_tokens}};
  j["types"] = nlohmann::json::object();
  for (const auto& [type, c] : by_type)
    j["types"][type] = {{"accuracy", c.accuracy()}, {"right", c.right}, {"total", c.total}};
  j["samples"] = nlohmann::json::array();
  for (const Sample& s : samples)
    j["samples"].push_back({{"prompt", s.prompt}, {"got", s.got}, {"want", s.want}, {"type", s.type}});
  return j;
}

ImageQuestionReport evaluate_image_questions(const InferenceModel& model, const Tokenizer& tok,
                                             std::span<const ImageTextExample> examples,
                                             const ImageQuestionOptions& o) {
  MYRIAD_REQUIRE(model.has_vision() && model.config().vision_config, kValue,
                 "image questions: the model has no vision tower");
  std::vector<const ImageTextExample*> questions;
  for (const ImageTextExample& e : examples)
    if (!e.answer.empty() && e.prompt_tokens > 0) questions.push_back(&e);
  MYRIAD_REQUIRE(!questions.empty(), kValue, "image questions: no questions (records with an answer) to ask");
  MYRIAD_REQUIRE(o.batch > 0 && o.max_new_tokens > 0, kValue, "image questions: batch and max_new_tokens must be > 0");
  const auto t0 = std::chrono::steady_clock::now();
  const VisionConfig& v = *model.config().vision_config;
  const int64_t D = model.config().hidden_size, text_vocab = tok.vocab_size();
  const int32_t eot = tok.end_of_text_id();
  const int64_t context = model.config().max_position_embeddings;
  ImageQuestionReport r;
  for (size_t first = 0; first < questions.size(); first += size_t(o.batch)) {
    const size_t n = std::min(questions.size() - first, size_t(o.batch));
    // One call of the tower for the batch's images, then each question's rows.
    std::vector<float> patches;
    std::vector<PatchGrid> grids;
    std::vector<int64_t> row_begin;
    int64_t rows = 0;
    for (size_t i = 0; i < n; ++i) {
      const ImageInput& im = questions[first + i]->images;
      patches.insert(patches.end(), im.values.begin(), im.values.end());
      grids.insert(grids.end(), im.grids.begin(), im.grids.end());
      row_begin.push_back(rows);
      for (int64_t t : im.tokens) rows += t;
    }
    Tensor features;
    if (!grids.empty()) {
      const int64_t row = 3 * v.patch_size * v.patch_size;
      features = model.encode_images(Tensor::from_vector(patches, {int64_t(patches.size()) / row, row}), grids);
    }
    std::vector<SequenceState> states;
    for (size_t i = 0; i < n; ++i) states.push_back(model.new_sequence());
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < n; ++i) {
      const ImageTextExample& e = *questions[first + i];
      BatchEntry entry{&states[i], std::span<const int32_t>(e.tokens.data(), size_t(e.prompt_tokens))};
      int64_t k = 0;
      for (int64_t t : e.images.tokens) k += t;
      if (k > 0) entry.image_rows = std::span<const float>(features.data<float>() + row_begin[i] * D, size_t(k * D));
      batch.push_back(entry);
    }
    std::vector<std::vector<int32_t>> out(n);
    std::vector<int32_t> next(n, -1);
    std::vector<bool> done(n, false);
    std::vector<size_t> live(n);  // batch row -> question
    for (size_t i = 0; i < n; ++i) live[i] = i;
    for (int step = 0; !batch.empty(); ++step) {
      const Tensor logits = model.forward(batch);  // [entries, vocab]
      const int64_t V = logits.size(1);
      std::vector<BatchEntry> again;
      std::vector<size_t> still;
      for (size_t b = 0; b < batch.size(); ++b) {
        const size_t i = live[b];
        const float* l = logits.data<float>() + int64_t(b) * V;
        // Greedy over the tokenizer's ids (a padded vocabulary's extra ids have no text).
        const int32_t t = int32_t(std::max_element(l, l + std::min(V, text_vocab)) - l);
        if (t == eot) continue;
        out[i].push_back(t);
        ++r.generated_tokens;
        if (int(out[i].size()) >= o.max_new_tokens || tok.decode(out[i]).find('\n') != std::string::npos) continue;
        if (questions[first + i]->prompt_tokens + int64_t(out[i].size()) >= context) continue;  // the context is full
        next[i] = t;
        again.push_back({&states[i], std::span<const int32_t>(&next[i], 1)});
        still.push_back(i);
      }
      batch = std::move(again);
      live = std::move(still);
    }
    for (size_t i = 0; i < n; ++i) {
      const ImageTextExample& e = *questions[first + i];
      std::string got = tok.decode(out[i]);
      got = trim(got.substr(0, got.find('\n')));
      const bool right = got == trim(e.answer);
      for (ImageQuestionReport::Count* c : {&r.by_type[e.type], &r.all}) {
        c->right += right;
        ++c->total;
      }
      if (int64_t(r.samples.size()) < o.keep_samples) {
        std::vector<int32_t> text;  // the prompt without its image tokens
        for (int64_t k = 0; k < e.prompt_tokens; ++k)
          if (e.tokens[size_t(k)] != *model.config().media_placeholder_token_id) text.push_back(e.tokens[size_t(k)]);
        r.samples.push_back({trim(tok.decode(text)), got, e.answer, e.type});
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace myriad
