#include "infer/image_input.h"

#include "core/error.h"

namespace myriad {

PatchOptions patch_options_for(const VisionConfig& v) {
  PatchOptions o;
  o.patch_size = v.patch_size;
  o.merge_h = v.merge_kernel_size[0];
  o.merge_w = v.merge_kernel_size[1];
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

}  // namespace myriad
