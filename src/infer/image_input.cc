#include "infer/image_input.h"

#include <algorithm>

#include "core/error.h"

namespace myriad {

PatchOptions patch_options_for(const VisionConfig& v) {
  PatchOptions o;
  o.patch_size = v.patch_size;
  o.merge_h = v.merge_kernel_size[0];
  o.merge_w = v.merge_kernel_size[1];
  // K3's projector: its processor's scale-down-and-pad (data/media/image.h kScaleAndPad).
  if (v.mm_projector_type == "patchmergerv2") o.fit = ImageFit::kScaleAndPad;
  if (v.in_patch_limit) o.max_patches = *v.in_patch_limit;
  if (v.patch_limit_on_one_side) o.max_side_patches = *v.patch_limit_on_one_side;
  for (int ch = 0; ch < 3; ++ch) {
    if (v.image_mean) o.mean[ch] = float((*v.image_mean)[size_t(ch)]);
    if (v.image_std) o.std[ch] = float((*v.image_std)[size_t(ch)]);
  }
  return o;
}

void require_vision(const ModelConfig& c, const std::string& what) {
  MYRIAD_REQUIRE(c.vision_config.has_value(), kValue, what,
                 ": this model has no vision tower (its config.json has no vision_config), so it cannot read images");
  MYRIAD_REQUIRE(c.media_placeholder_token_id.has_value(), kValue, what,
                 ": this model's config has no media_placeholder_token_id to place images at");
}

Tensor ImageInput::patches(const VisionConfig& v) const {
  const int64_t row = 3 * v.patch_size * v.patch_size;
  return Tensor::from_vector(values, {int64_t(values.size()) / row, row});
}

void add_image(ImageInput& in, const VisionConfig& v, const Image& image) {
  const ImagePatches p = image_to_patches(image, patch_options_for(v));
  in.values.insert(in.values.end(), p.values.begin(), p.values.end());
  in.grids.push_back({p.grid_h, p.grid_w});
  in.tokens.push_back(vision_tokens(v, in.grids.back()));
}

int64_t max_video_frames(const VisionConfig& v) {
  return 4 * v.init_pos_emb_time.value_or(4);
}

void add_video(ImageInput& in, const VisionConfig& v, const Video& video) {
  MYRIAD_REQUIRE(!video.frames.empty(), kValue, "a video without frames");
  const int64_t chunk = v.init_pos_emb_time.value_or(4);
  PatchOptions o = patch_options_for(v);
  o.max_patches = std::max(o.max_patches / chunk, o.merge_h * o.merge_w);
  const std::vector<int64_t> keep = sample_frames(int64_t(video.frames.size()), max_video_frames(v));
  int64_t tokens = 0;
  for (size_t first = 0; first < keep.size(); first += size_t(chunk)) {
    const size_t end = std::min(keep.size(), first + size_t(chunk));
    PatchGrid g;
    for (size_t i = first; i < end; ++i) {
      const ImagePatches p = image_to_patches(video.frames[size_t(keep[i])], o);
      in.values.insert(in.values.end(), p.values.begin(), p.values.end());
      g = {p.grid_h, p.grid_w, int64_t(end - first)};
    }
    in.grids.push_back(g);
    tokens += vision_tokens(v, g);
  }
  in.tokens.push_back(tokens);
}

}  // namespace myriad
