// Image-question datasets as JSONL: see image_datasets.h.
#include "data/datasets/image_datasets.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/datasets/idx.h"
#include "data/datasets/motion_clips.h"
#include "data/datasets/shape_images.h"
#include "data/media/image.h"
#include "io/atomic_file.h"

namespace myriad {

namespace {

std::string question_line(const Image& image, const std::string& prompt, const std::string& answer,
                          const std::string& type) {
  return nlohmann::json{{"images", {png_data_uri(image)}}, {"prompt", prompt}, {"answer", answer}, {"type", type}}
             .dump() +
         "\n";
}

}  // namespace

ImageDatasetSummary write_shape_dataset(const std::string& dir, int64_t train_scenes, int64_t test_scenes,
                                        int64_t size) {
  MYRIAD_REQUIRE(train_scenes > 0 && test_scenes > 0, kValue, "shapes: the train and test scene counts (", train_scenes,
                 ", ", test_scenes, ") must be positive");
  std::filesystem::create_directories(dir);
  ImageDatasetSummary s;
  for (const bool test : {false, true}) {
    std::string text;
    const int64_t n = test ? test_scenes : train_scenes;
    for (int64_t i = 0; i < n; ++i) {
      const ShapeScene scene = make_shape_scene(split_seed(test, uint64_t(i)), size);
      const ShapeQuestion& q = scene.questions[size_t(i) % scene.questions.size()];
      text += question_line(scene.image, q.question, q.answer, q.family);
    }
    write_file_atomic(dir + (test ? "/test.jsonl" : "/train.jsonl"), text);
    (test ? s.test : s.train) = n;
    s.bytes += int64_t(text.size());
  }
  return s;
}

ImageDatasetSummary write_motion_dataset(const std::string& dir, int64_t train_clips, int64_t test_clips, int64_t size,
                                         int64_t frames) {
  MYRIAD_REQUIRE(train_clips > 0 && test_clips > 0, kValue, "motion: the train and test clip counts (", train_clips,
                 ", ", test_clips, ") must be positive");
  std::filesystem::create_directories(dir);
  ImageDatasetSummary s;
  for (const bool test : {false, true}) {
    std::string text;
    const int64_t n = test ? test_clips : train_clips;
    for (int64_t i = 0; i < n; ++i) {
      const MotionClip clip = make_motion_clip(split_seed(test, uint64_t(i)), size, frames);
      const ShapeQuestion& q = clip.questions[size_t(i) % clip.questions.size()];
      nlohmann::json video = nlohmann::json::array();
      for (const Image& f : clip.video.frames) video.push_back(png_data_uri(f));
      text +=
          nlohmann::json{{"videos", {video}}, {"prompt", q.question}, {"answer", q.answer}, {"type", q.family}}.dump() +
          "\n";
    }
    write_file_atomic(dir + (test ? "/test.jsonl" : "/train.jsonl"), text);
    (test ? s.test : s.train) = n;
    s.bytes += int64_t(text.size());
  }
  return s;
}

ImageDatasetSummary write_mnist_dataset(const std::string& images_idx, const std::string& labels_idx,
                                        const std::string& dir, int64_t train, int64_t test) {
  const LabeledImages m = read_mnist(images_idx, labels_idx);
  const int64_t n = int64_t(m.images.size());
  MYRIAD_REQUIRE(train > 0 && train < n, kValue, "mnist: --train ", train, " must lie in 1..", n - 1,
                 " (the files hold ", n, " images; the rest are the test set)");
  MYRIAD_REQUIRE(test != 0, kValue, "mnist: --test 0 leaves no test set");
  const int64_t end = test < 0 ? n : std::min(n, train + test);
  std::filesystem::create_directories(dir);
  ImageDatasetSummary s;
  std::string text;
  for (int64_t i = 0; i < end; ++i) {
    text += question_line(m.images[size_t(i)], "which digit is this?", std::to_string(m.labels[size_t(i)]), "digit");
    if (i + 1 == train || i + 1 == end) {
      write_file_atomic(dir + (i + 1 == train ? "/train.jsonl" : "/test.jsonl"), text);
      s.bytes += int64_t(text.size());
      text.clear();
    }
  }
  s.train = train;
  s.test = end - train;
  return s;
}

}  // namespace myriad
