// A small vision tower for tests: MoonViT's structure (one block, two heads, the 2x2 merge) at test widths.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace myriad::test {

// patch: pixels per patch side; width: the tower's hidden size (and the projector's hidden width); mlp: the tower's
// MLP width; pos_grid: the learned position grid's side (interpolated to each image's grid).
inline VisionConfig small_vision_config(int64_t patch, int64_t width, int64_t mlp, int64_t text_hidden,
                                        int64_t pos_grid) {
  VisionConfig v;
  v.patch_size = patch;
  v.vt_hidden_size = width;
  v.vt_intermediate_size = mlp;
  v.vt_num_attention_heads = 2;
  v.vt_num_hidden_layers = 1;
  v.merge_kernel_size = {2, 2};
  v.text_hidden_size = text_hidden;
  v.mm_hidden_size = width;
  v.init_pos_emb_height = pos_grid;
  v.init_pos_emb_width = pos_grid;
  v.init_pos_emb_time = 4;
  return v;
}

}  // namespace myriad::test
