// Images prepared for a model's vision tower: each decoded image resized and cut into patches at the model's
// patch size and merge window (docs/vision.md "Input"), packed for one encode_images call, with the number of
// tokens it takes in the prompt. What `generate --image`, `chat /image`, the server's image_url parts and the
// image-text training sources share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/media/image.h"
#include "data/media/video.h"
#include "model/config.h"
#include "model/vision_tower.h"

namespace myriad {

// The patching of a model's images: its vision_config's patch size and merge window; K3's scale-down-and-pad for
// its projector type (patchmergerv2), myriad's stretch to whole windows for Kimi-VL / K2.5's (patchmerger); the
// budget, side limit and normalisation of the checkpoint's preprocessor_config.json where it has one, else
// myriad's (16384 patches, 512 per side, mean and std 0.5).
PatchOptions patch_options_for(const VisionConfig& v);

// Throws kValue naming `what` (a flag, a request field) when the model cannot take images: no vision_config (no
// vision tower) or no media_placeholder_token_id to place them at.
void require_vision(const ModelConfig& c, const std::string& what);

struct ImageInput {
  std::vector<float> values;     // every image's patches, [patch rows, 3 p p] row-major, images in order
  std::vector<PatchGrid> grids;  // per image, and per chunk of a video
  std::vector<int64_t> tokens;   // per image or video: the placeholder run it takes (its grids' vision_tokens)
  bool empty() const { return grids.empty(); }
  // The patches as the vision tower takes them: f32 [patch rows, 3 p p].
  Tensor patches(const VisionConfig& v) const;
};

// Appends an image, patched for the model's tower.
void add_image(ImageInput& in, const VisionConfig& v, const Image& image);

// Frames of a video the tower sees at most: four chunks of init_pos_emb_time frames (16 for K3).
int64_t max_video_frames(const VisionConfig& v);

// Appends a video: at most max_video_frames frames spread over it (sample_frames), each patched at
// 1 / init_pos_emb_time of the image budget so that a chunk holds no more patches than one image, in chunks of
// init_pos_emb_time frames (the last may be shorter; a chunk of one frame is an image). Its placeholder run is
// its chunks' tokens together.
void add_video(ImageInput& in, const VisionConfig& v, const Video& video);

}  // namespace myriad
