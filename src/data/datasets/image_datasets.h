// Image-question datasets written as image-text JSONL (data/datasets/image_text_records.h), images inline as PNG data:
// URIs (one file per split, written atomically): what `myriad data shapes` and `myriad data mnist` make, for `myriad
// train --data DIR/train.jsonl` and `myriad eval images --data DIR/test.jsonl`.
//   shapes  the built-in shape scenes (data/datasets/shape_images.h): scene i of a split asks its question i mod (its
//           questions), type = the question's family (count, colour, shape, where); train and test scenes come
//           from disjoint seeds.
//   motion  the built-in motion clips (data/datasets/motion_clips.h): clip i asks "which way does the square move?"
//   (type
//           motion) when i is even, "what colour is the square?" (colour) when odd; its frames inline as a list of
//           PNG data: URIs ("videos": [[...]]); train and test clips from disjoint seeds.
//   mnist   MNIST's IDX files (images and labels): "which digit is this?" answered by the digit ("7"), type
//           "digit"; the first `train` images for training, the rest for testing.
#pragma once

#include <cstdint>
#include <string>

namespace myriad {

struct ImageDatasetSummary {
  int64_t train = 0, test = 0;  // records written
  int64_t bytes = 0;            // of both files
};

// DIR/train.jsonl and DIR/test.jsonl; scene images of size x size pixels.
ImageDatasetSummary write_shape_dataset(const std::string& dir, int64_t train_scenes, int64_t test_scenes,
                                        int64_t size = 56);

// DIR/train.jsonl and DIR/test.jsonl; clips of `frames` frames of size x size pixels.
ImageDatasetSummary write_motion_dataset(const std::string& dir, int64_t train_clips, int64_t test_clips,
                                         int64_t size = 28, int64_t frames = 4);

// DIR/train.jsonl (the first `train` images) and DIR/test.jsonl (the rest, at most `test` of them; <0: all).
// kValue when train is not below the number of images.
ImageDatasetSummary write_mnist_dataset(const std::string& images_idx, const std::string& labels_idx,
                                        const std::string& dir, int64_t train, int64_t test = -1);

}  // namespace myriad
