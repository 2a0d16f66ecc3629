"""myriad's image preprocessing for K3's projector (data/media/image.h kScaleAndPad) against the reference written from
K3's published processor (tests/reference/k3_image_ref.py: its arithmetic, Pillow's BICUBIC resize, black padding
on the right and at the bottom, the normalisation, the patch order).

`myriad vision patch` patches images of odd sizes for a configs/tiny-vl.json model (patch 14, merge 2 x 2, no
preprocessor_config.json: myriad's budget of 16384 patches and 512 per side), then for the same model with a
preprocessor_config.json of other limits and normalisation, and is compared with the reference:

  - grid, content size and token count: exactly (integer arithmetic; the scale in doubles, as Python's).
  - pixels of images that are not resized (scale 1: the image fits the budget, only padded): within 2e-6 of the
    reference's float64 values (myriad normalises in float32: |x| <= 4.1 here, one rounding of ~2.4e-7 each).
  - pixels of resized images: Pillow's BICUBIC and stb_image_resize's Catmull-Rom are the same cubic (a = -0.5,
    widened by the scale when shrinking), but Pillow rounds its horizontal pass to 8 bits and renormalises the
    taps at the borders where stb clamps the edge pixel: a difference of a few levels of 255 is the expected
    worst case. Asked: mean |difference| <= 0.5 level (0.0039 after normalisation by std 0.5), 99% of values
    within 1.5 levels and none beyond 4 (measured: mean 0.17-0.21, 99% 1.0, max 1.0-1.9 levels). Padding pixels:
    black, within the same 2e-6 as unresized pixels.
  - a preprocessor_config.json whose patch size differs from config.json's is refused with one error naming both.

The stretching preprocessing this replaced for K3 gives other grids for every odd size here (100 x 75 became
6 x 6 patches stretched; the reference pads it to 6 x 8), so the exact grid check is what catches a regression.

Usage: image_preprocess.py MYRIAD ROOT WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image
from safetensors.numpy import load_file

myriad, root, work = sys.argv[1:4]
sys.path.insert(0, os.path.join(root, "tests", "reference"))
sys.path.insert(0, os.path.join(root, "tests", "interop"))
import k3_image_ref as R  # noqa: E402
from interop_checks import Checks  # noqa: E402

os.makedirs(work, exist_ok=True)
check = Checks()


def smooth_image(w, h, seed):
    """Smooth colour fields plus mild noise: resampling differences stay a property of the filters, not aliasing."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for c in range(3):
        fx, fy, ph = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.28)
        v = 127.5 + 100 * np.sin(2 * np.pi * (fx * x / w + fy * y / h) + ph) + rng.normal(0, 4, (h, w))
        chans.append(v)
    return Image.fromarray(np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8), "RGB")


def compare_with_reference(model, sizes, limits, mean, std, tag):
    paths = []
    for i, (w, h) in enumerate(sizes):
        p = os.path.join(work, f"{tag}_{i}_{w}x{h}.png")
        smooth_image(w, h, i).save(p)
        paths.append(p)
    out = os.path.join(work, f"{tag}.safetensors")
    subprocess.run([myriad, "vision", "patch", "--model", model, "--out", out] + paths, check=True,
                   stdout=subprocess.DEVNULL)
    got = load_file(out)
    row = 0
    for i, ((w, h), p) in enumerate(zip(sizes, paths)):
        ref = R.preprocess(Image.open(p), 14, 2, limits[0], limits[1], mean, std)
        grid = tuple(int(v) for v in got["grids"][i])
        content = tuple(int(v) for v in got["content"][i])
        tokens = int(got["tokens"][i])
        name = f"{tag} {w} x {h}"
        if not check(grid == ref["grid"] and content == ref["content"] and tokens == ref["tokens"],
                     f"{name}: grid {grid} content {content} tokens {tokens}; reference grid {ref['grid']} content "
                     f"{ref['content']} tokens {ref['tokens']}"):
            return
        n = grid[0] * grid[1]
        mine = got["patches"][row:row + n].astype(np.float64)
        row += n
        want = ref["patches"]
        # Back to pixel layout [H, W, 3] to split content from padding.
        def image_of(pt):
            return pt.reshape(grid[0], grid[1], 3, 14, 14).transpose(0, 3, 1, 4, 2).reshape(grid[0] * 14,
                                                                                            grid[1] * 14, 3)
        a, b = image_of(mine), image_of(want)
        cw, ch = content
        pad = np.ones(a.shape[:2], dtype=bool)
        pad[:ch, :cw] = False
        if pad.any():
            check(np.abs(a[pad] - b[pad]).max() <= 2e-6,
                  f"{name}: padding black as the reference's (max |diff| {np.abs(a[pad] - b[pad]).max():.3g})")
        d = np.abs(a[~pad] - b[~pad])
        resized = content != (w, h)
        if not resized:
            check(d.max() <= 2e-6, f"{name}: grid {grid}, {tokens} tokens, not resized: max |diff| {d.max():.2e}")
        else:
            level = 1.0 / (255.0 * min(std))  # one 8-bit level after normalisation (the largest)
            mean_lv, p99_lv, max_lv = d.mean() / level, np.percentile(d, 99) / level, d.max() / level
            check(mean_lv <= 0.5 and p99_lv <= 1.5 and max_lv <= 4.0,
                  f"{name}: grid {grid}, {tokens} tokens, resized to {cw} x {ch}: |diff| mean {mean_lv:.3f}, "
                  f"99% {p99_lv:.2f}, max {max_lv:.1f} levels of 255")
    check(row == got["patches"].shape[0], f"{tag}: {got['patches'].shape[0]} patch rows, the grids account for {row}")


model = os.path.join(work, "model")
subprocess.run([myriad, "init", "--config", os.path.join(root, "configs", "tiny-vl.json"), "--out", model,
                "--force"], check=True, stdout=subprocess.DEVNULL)
if os.path.exists(os.path.join(model, "preprocessor_config.json")):
    os.remove(os.path.join(model, "preprocessor_config.json"))
# Odd sizes under the budget (padded only), one smaller than a window, exact windows, and three over a limit:
# the patch budget (2500 x 1900: 178 x 135 patches > 16384), the side limit (8000 x 20: 571 patches along one side),
# both near (600 x 7400: the budget binds first).
sizes = [(100, 75), (13, 9), (57, 200), (28, 28), (29, 1), (1, 300), (2500, 1900), (8000, 20), (600, 7400)]
compare_with_reference(model, sizes, (16384, 512), (0.5,) * 3, (0.5,) * 3, "default")

# The checkpoint's own processor settings (K3 ships them in preprocessor_config.json).
model2 = os.path.join(work, "model_pre")
shutil.rmtree(model2, ignore_errors=True)
shutil.copytree(model, model2)
mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
with open(os.path.join(model2, "preprocessor_config.json"), "w") as f:
    json.dump({"media_proc_cfg": {"in_patch_limit": 1024, "patch_limit_on_one_side": 40, "patch_size": 14,
                                  "merge_kernel_size": 2, "image_mean": list(mean), "image_std": list(std)}}, f)
compare_with_reference(model2, [(700, 500), (1000, 60), (90, 45)], (1024, 40), mean, std, "preprocessor_config")

# A processor whose patch size is not the tower's.
with open(os.path.join(model2, "preprocessor_config.json"), "w") as f:
    json.dump({"media_proc_cfg": {"patch_size": 16}}, f)
r = subprocess.run([myriad, "vision", "patch", "--model", model2, "--out", os.path.join(work, "x.safetensors"),
                    os.path.join(work, "default_0_100x75.png")], capture_output=True, text=True)
check(r.returncode != 0 and "patch_size = 16" in r.stderr and "patch_size = 14" in r.stderr,
      f"a mismatched preprocessor_config.json refused: exit {r.returncode}, {r.stderr.strip()!r}")
check.finish("image_preprocess")
