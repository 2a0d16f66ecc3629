"""Parity of myriad's vision tower and projector with the float64 PyTorch reference (tests/reference/vision_ref.py).

For each config variant: `myriad init` writes a model with a vision tower; its vision tensors are replaced by
random values large enough to exercise every path (std 0.1-0.3, norm weights around 1, non-zero biases); random
patches of several images of different grids (one equal to the position table's size, so the table is used
as is; one up-sampled and non-square; one down-sampled) and two video chunks (4 and 2 frames) and a random cotangent go to `myriad vision encode
--grads` and to the reference. Compared: the features, grad.patches and grad.<name> of every vision tensor.

Then the same images placed at runs of media_placeholder_token_id inside text, through the whole model
(`myriad logits --images --grads` against tests/reference/kimi_ref.py fed the same embeddings): logits, loss and
every text and vision tensor's gradient, at parity.py's tolerance for the text model.

Tolerance of the tower alone, per tensor: max |myriad - ref| <= 2e-5 * max |ref| + 1e-7. myriad computes in float32 through two
blocks, sums of up to ~200 terms and a softmax per image; float32's 6e-8 unit roundoff grows roughly with the
square root of those lengths along the gradients' chains: measured worst 9.4e-7 relative, so 2e-5 keeps 20x
headroom. A causal mask left on or a rotary pair turned by the wrong axis misses by 0.6-2 relative (checked by
breaking them).

Usage: vision_parity.py MYRIAD ROOT WORKDIR
"""
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

myriad, root, work = sys.argv[1:4]
sys.path.insert(0, os.path.join(root, "tests", "reference"))
import kimi_ref as K  # noqa: E402
import vision_ref as R  # noqa: E402

torch.manual_seed(0)
os.makedirs(work, exist_ok=True)
text = json.load(open(os.path.join(root, "configs", "tiny.json")))

VARIANTS = {
    # K3's options: RMSNorm, no biases, tanh-GELU MLP, exact GELU projector, attention wider than the tower.
    "k3": {"patch_size": 4, "vt_hidden_size": 32, "vt_intermediate_size": 48, "vt_num_attention_heads": 2,
           "qkv_hidden_size": 48, "vt_num_hidden_layers": 2, "merge_kernel_size": [2, 2],
           "init_pos_emb_height": 4, "init_pos_emb_width": 6, "norm_type": "rmsnorm"},
    # LayerNorm and every bias, exact GELU in the MLP, a 1 x 2 merge window, Kimi-VL's / K2.5's projector.
    "biases": {"patch_size": 3, "vt_hidden_size": 24, "vt_intermediate_size": 40, "vt_num_attention_heads": 3,
               "vt_num_hidden_layers": 2, "merge_kernel_size": [1, 2], "init_pos_emb_height": 4,
               "init_pos_emb_width": 4, "norm_type": "layernorm", "attn_bias": True, "linear_bias": True,
               "patch_embed_proj_bias": True, "activation_func": "gelu", "projector_hidden_act": "gelu_pytorch_tanh",
               "mm_projector_type": "patchmerger"},
}

PLACEHOLDER = text["media_placeholder_token_id"]  # tiny.json's
failures = 0


def compare(name, got, want, rtol, atol):
    """Prints and counts the tensors outside rtol * max |ref| + atol; returns the worst relative error."""
    global failures
    if set(want) != set(got):
        print(f"FAIL {name}: tensors differ: only myriad {sorted(set(got) - set(want))[:5]}, "
              f"only reference {sorted(set(want) - set(got))[:5]}")
        failures += 1
        return float("inf")
    worst = 0.0
    for k, ref in want.items():
        err = (got[k].double() - ref).abs().max().item() if ref.numel() else 0.0
        scale = ref.abs().max().item() if ref.numel() else 0.0
        worst = max(worst, err / (scale + 1e-30))
        if err > rtol * scale + atol:
            print(f"FAIL {name} {k}: max |myriad - ref| {err:.3e} > {rtol:g} * {scale:.3e} + {atol:g}")
            failures += 1
    return worst


for name, vis in VARIANTS.items():
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cfg = {"model_type": "kimi_k3", "text_config": text, "vision_config": vis,
           "eos_token_id": text["eos_token_id"]}
    cfg_path = os.path.join(d, "config.json")
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    model = os.path.join(d, "model")
    subprocess.run([myriad, "init", "--config", cfg_path, "--out", model, "--seed", "3", "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    weights = load_file(os.path.join(model, "model.safetensors"))
    for k in list(weights):
        if not (k.startswith("vision_tower.") or k.startswith("mm_projector.")):
            continue
        t = weights[k]
        if "norm" in k and k.endswith(".weight"):
            weights[k] = 1.0 + 0.2 * torch.randn_like(t)
        elif k.endswith(".bias"):
            weights[k] = 0.1 * torch.randn_like(t)
        elif "pos_emb" in k:
            weights[k] = 0.3 * torch.randn_like(t)
        else:
            weights[k] = torch.randn_like(t) / (t[0].numel() ** 0.5)
    save_file(weights, os.path.join(model, "model.safetensors"))

    v = R.fill_defaults(vis, text["hidden_size"])
    kh, kw = v["merge_kernel_size"]
    H0, W0 = v["init_pos_emb_height"], v["init_pos_emb_width"]
    # (t, h, w): four images, then video chunks of 4 (init_pos_emb_time, K3's default) and 2 frames.
    grids = [(1, H0, W0), (1, 3 * kh, 5 * kw), (1, kh, kw), (1, 2 * kh, 1 * kw), (4, 2 * kh, 3 * kw), (2, kh, 2 * kw)]
    L = sum(t * h * w for t, h, w in grids)
    tokens = sum((h // kh) * (w // kw) for t, h, w in grids)
    patches = torch.randn(L, 3 * v["patch_size"] ** 2)
    cot = torch.randn(tokens, text["hidden_size"])
    inp = os.path.join(d, "input.safetensors")
    save_file({"patches": patches, "grids": torch.tensor(grids, dtype=torch.int64), "cotangent": cot}, inp)
    mine = os.path.join(d, "myriad.safetensors")
    subprocess.run([myriad, "vision", "encode", "--model", model, "--input", inp, "--out", mine, "--grads"],
                   check=True, stdout=subprocess.DEVNULL)
    got = load_file(mine)

    W = {k: t.double().requires_grad_(True) for k, t in weights.items()
         if k.startswith("vision_tower.") or k.startswith("mm_projector.")}
    px = patches.double().requires_grad_(True)
    feats = R.encode(v, W, px, grids)
    (feats * cot.double()).sum().backward()
    want = {"features": feats.detach(), "grad.patches": px.grad}
    want.update({"grad." + k: t.grad for k, t in W.items()})

    worst = compare(name, got, want, 2e-5, 1e-7)
    print(f"{name}: {len(want)} tensors ({len(grids)} images and video chunks, {L} patches -> {tokens} tokens), "
          f"worst relative error {worst:.2e}")

    # Placement: the images' tokens at their placeholder runs inside text, through the whole text model, the loss
    # on text targets only; logits, loss and the gradient of every tensor (text and vision) against kimi_ref.py
    # fed the same embeddings. Tolerance as tests/model/parity.py's for the text model (1e-3 * max |ref| + 1e-6:
    # float32 through KDA chunks, MoE routing and AttnRes reads).
    sizes = [(h // kh) * (w // kw) for t, h, w in grids]
    ids, text_ids = [], [5, 17, 300, 9, 44, 45, 100, 8, 99, 17, 300, 13, 42, 7, 61, 250, 33, 18]
    for i, n in enumerate(sizes):
        ids += text_ids[i * 3:i * 3 + 3] + [PLACEHOLDER] * n
    ids += [2, 12]
    targets = [t if t != PLACEHOLDER else -100 for t in ids[1:]] + [-100]
    out = os.path.join(d, "logits.safetensors")
    subprocess.run([myriad, "logits", "--model", model, "--tokens", ",".join(map(str, ids)), "--targets",
                    ",".join(map(str, targets)), "--images", inp, "--grads", "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    got = load_file(out)
    kc = K.Config(text)
    P = K.prepare(weights)
    feats = R.encode(v, P, patches.double(), grids)
    emb = P["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.tensor(ids) == PLACEHOLDER
    emb = emb.masked_scatter(mask[:, None], feats)
    logits = K.forward(kc, P, ids, embeddings=emb)
    loss = K.cross_entropy(logits, targets)
    params = [n for n in P if K.is_param(n)]
    grads = torch.autograd.grad(loss, [P[n] for n in params], allow_unused=True)
    want = {"logits": logits.detach(), "loss": loss.detach()}
    want.update({"grad." + n: (torch.zeros_like(P[n]) if g is None else g) for n, g in zip(params, grads)})
    worst = compare(name + " placed", got, want, 1e-3, 1e-6)
    print(f"{name} placed in text: {len(ids)} tokens ({sum(sizes)} from images), logits, loss and "
          f"{len(want) - 2} gradients, worst relative error {worst:.2e}")

if failures:
    print(f"vision parity: {failures} failure(s)")
    sys.exit(1)
print("vision parity: OK")
