// K3's vision tower (a MoonViT with K3's options) and its patch-merger projector on autograd Vars: pixels of
// native-resolution images in, one text-width vector per merged image token out (docs/vision.md has the
// mathematics). The same function serves training (gradients reach every tensor: patch embedding, position
// embedding, blocks, merge, projector), prefill and serving (run without a tape).
//
// Input layout. Each image is a grid of h x w patches (h, w multiples of merge_kernel_size); a patch row holds
// its 3 p p pixel values in (channel, row, col) order, the layout of K3's Conv2d patch embedding
// [D, 3, p, p]; the images' patches follow one another, each image row-major over its grid. Images of
// different sizes are packed into one call; attention stays within each image. A video chunk is a grid of t
// frames (1 <= t <= init_pos_emb_time): its t h w patches frame after frame, attending to one another across
// the frames; sd2_tpool averages each patch position over the frames before the merge, so a chunk gives the
// tokens of one image of its size.
//
// Output: for each image its (h / kh) (w / kw) merged tokens, row-major over the merged grid, images in order:
// [sum_i h_i w_i / (kh kw), text_hidden_size].
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/tape.h"
#include "core/tensor.h"
#include "model/config.h"

namespace myriad {

class ModelWeights;

// One image as the tower sees it: h x w patches of patch_size x patch_size pixels; or a video chunk of t such
// frames.
struct PatchGrid {
  int64_t h = 0, w = 0;
  int64_t t = 1;  // frames
  int64_t patches() const { return t * h * w; }
};

// Merged tokens an image of this grid becomes (what the text's placeholder run must hold).
int64_t vision_tokens(const VisionConfig& v, const PatchGrid& g);

// Checks the grids against the config and the patch rows (kShape naming the image, its grid and the rule).
void check_patch_grids(const VisionConfig& v, const std::vector<PatchGrid>& grids, int64_t patch_rows);

// The 2-D rotary tables of the grids' patches: cos / sin [L, head_dim / 2]. Rotated pair 2i turns with the
// patch's column, pair 2i+1 with its row, both at frequency 10000^(-4i / head_dim) (MoonViT's 2-D RoPE); every
// frame of a chunk has its image's table.
void vision_rope_tables(int64_t head_dim, const std::vector<PatchGrid>& grids, Tensor* cos, Tensor* sin);

// The fixed temporal embedding added to frame f of a chunk of t > 1 frames (divided_fixed): [frames, D], row f =
// (sin(f w_0) .. sin(f w_{D/2-1}), cos(f w_0) .. cos(f w_{D/2-1})), w_i = 10000^(-i / (D/2)).
Tensor vision_time_embedding(int64_t frames, int64_t dim);

// patches [L, 3 p p] -> [N, text_hidden_size]. Throws kShape for grids that do not fit (check_patch_grids).
ag::Var encode_images(const VisionConfig& v, const ModelWeights& w, const ag::Var& patches,
                      const std::vector<PatchGrid>& grids);

}  // namespace myriad
