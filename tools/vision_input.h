// The patch file `myriad vision encode` and `myriad logits --images` read: a safetensors file holding
// patches f32 [L, 3 p p] and grids i64 [images, 2] (h, w in patches) or [images, 3] (t, h, w: video chunks of t
// frames), plus optional tensors the caller asks for.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/vision_tower.h"

namespace myriad::cli {

// `name` from `f`, checked for dtype and rank (kValue naming the file, the tensor, what was expected and found).
inline Tensor patch_file_tensor(const SafetensorsFile& f, const std::string& name, DType dtype, int64_t ndim) {
  MYRIAD_REQUIRE(f.contains(name), kValue, f.path(), ": no tensor '", name, "'");
  Tensor t = f.tensor(name);
  MYRIAD_REQUIRE(t.dtype() == dtype && t.ndim() == ndim, kValue, f.path(), ": tensor '", name, "' must be ",
                 dtype_name(dtype), " with ", ndim, " dims, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
  return t.contiguous();
}

// The grids of the file's `grids` tensor.
inline std::vector<PatchGrid> patch_file_grids(const SafetensorsFile& f) {
  const Tensor g = patch_file_tensor(f, "grids", DType::kI64, 2);
  const int64_t cols = g.shape()[1];
  MYRIAD_REQUIRE(cols == 2 || cols == 3, kValue, f.path(),
                 ": 'grids' must be [images, 2] (h, w in patches) or [images, 3] (t, h, w), got ",
                 shape_str(g.shape()));
  std::vector<PatchGrid> grids;
  const int64_t* d = g.data<int64_t>();
  for (int64_t i = 0; i < g.shape()[0]; ++i) {
    const int64_t* r = d + cols * i;
    grids.push_back(cols == 2 ? PatchGrid{r[0], r[1]} : PatchGrid{r[1], r[2], r[0]});
  }
  return grids;
}

}  // namespace myriad::cli
