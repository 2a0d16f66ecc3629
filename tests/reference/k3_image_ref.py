"""Reference of K3's image preprocessing, written from its published processor's steps (the navit_resize_image
arithmetic that vLLM's and SGLang's Kimi ports carry), with Pillow doing the resampling as the reference does:

  1. scale = min(1, sqrt(in_patch_limit / (max(1, w // p) * max(1, h // p))), limit * p / w, limit * p / h)
     (limit = patch_limit_on_one_side); new side = min(limit * p, max(1, int(side * scale)))
  2. Image.resize((new_w, new_h), BICUBIC) (skipped by Pillow when the size is unchanged)
  3. black (0) pixels appended on the right and at the bottom up to a multiple of merge * p
  4. x / 255, minus image_mean, divided by image_std, per channel
  5. cut into p x p patches, row-major over the grid, each patch (channel, row, col)

    preprocess(pil_rgb_image, patch_size, merge, in_patch_limit, side_limit, mean, std)
      -> dict(patches float64 [L, 3 p p], grid (h, w), content (w, h), tokens)
"""
import math

import numpy as np
from PIL import Image


def resize_plan(width, height, patch_size, merge, in_patch_limit, side_limit):
    per_w = max(1.0, width // patch_size)
    per_h = max(1.0, height // patch_size)
    scale = min(1.0, math.sqrt(in_patch_limit / (per_w * per_h)), side_limit * patch_size / width,
                side_limit * patch_size / height)
    new_w = min(side_limit * patch_size, max(1, int(width * scale)))
    new_h = min(side_limit * patch_size, max(1, int(height * scale)))
    window = merge * patch_size
    padded_w = new_w + (window - new_w % window) % window
    padded_h = new_h + (window - new_h % window) % window
    return new_w, new_h, padded_w, padded_h


def preprocess(image, patch_size, merge, in_patch_limit, side_limit, mean=(0.5,) * 3, std=(0.5,) * 3):
    w, h = image.size
    new_w, new_h, padded_w, padded_h = resize_plan(w, h, patch_size, merge, in_patch_limit, side_limit)
    pixels = np.asarray(image.convert("RGB").resize((new_w, new_h), resample=Image.BICUBIC), dtype=np.uint8)
    canvas = np.zeros((padded_h, padded_w, 3), dtype=np.uint8)
    canvas[:new_h, :new_w] = pixels
    x = (canvas.astype(np.float64) / 255.0 - np.array(mean)) / np.array(std)
    gh, gw = padded_h // patch_size, padded_w // patch_size
    patches = x.reshape(gh, patch_size, gw, patch_size, 3).transpose(0, 2, 4, 1, 3).reshape(gh * gw, -1)
    return {"patches": patches, "grid": (gh, gw), "content": (new_w, new_h), "tokens": gh * gw // (merge * merge)}
