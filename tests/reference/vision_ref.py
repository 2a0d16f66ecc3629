"""Plain-PyTorch reference of myriad's vision tower and projector (K3's MoonViT options; docs/vision.md).

Written from the formulas of docs/vision.md, by other routes than the C++ code where PyTorch has one: the patch
embedding is a strided conv2d, the position table is resized with F.interpolate (bilinear, align_corners False),
the 2-D rotary embedding multiplies complex numbers, attention is a dense softmax per image, the projector's
norm is F.layer_norm, the activations are F.gelu. Float64 by default; autograd gives every gradient.

    W = {name: tensor}                                  # vision_tower.* and mm_projector.*
    feats = encode(vcfg, W, patches [L, 3 p p], grids [(h, w) or (t, h, w), ...])   # -> [tokens, text_hidden]

A grid of t > 1 frames is a video chunk: its t h w patches frame after frame, one attention over all of them, a
fixed sin-cos embedding of the frame added, and each patch position averaged over the frames before the merge.

vcfg is the config's vision_config dict with K3's defaults filled (see fill_defaults).
"""
import math

import torch
import torch.nn.functional as F

# The tower's norms (docs/vision.md: the config names none): nn.LayerNorm's default, and nn.RMSNorm's, which is
# float32's machine epsilon.
LAYER_NORM_EPS = 1e-5
RMS_NORM_EPS = torch.finfo(torch.float32).eps


def fill_defaults(v, text_hidden):
    v = dict(v)
    v.setdefault("merge_kernel_size", [2, 2])
    v.setdefault("qkv_hidden_size", v["vt_hidden_size"])
    v.setdefault("init_pos_emb_height", 64)
    v.setdefault("init_pos_emb_width", 64)
    v.setdefault("text_hidden_size", text_hidden)
    v.setdefault("activation_func", "gelu_pytorch_tanh")
    v.setdefault("projector_hidden_act", "gelu")
    v.setdefault("projector_ln_eps", 1e-5)
    v.setdefault("norm_type", "rmsnorm")
    v.setdefault("mm_projector_type", "patchmergerv2")
    return v


def act(x, name):
    return F.gelu(x, approximate="tanh") if name == "gelu_pytorch_tanh" else F.gelu(x)


def tower_norm(v, W, x, name):
    if v["norm_type"] == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), W[name + ".weight"], W[name + ".bias"], LAYER_NORM_EPS)
    return rms_norm(x, W[name + ".weight"], RMS_NORM_EPS)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def lin(W, x, name):
    y = x @ W[name + ".weight"].T
    return y + W[name + ".bias"] if name + ".bias" in W else y


def time_embedding(t, D):
    """[t, D]: frame f gets sin(f w_i) in its first D/2 values and cos(f w_i) in the rest, w_i = 10000^(-i/(D/2))."""
    w = 10000.0 ** (-torch.arange(D // 2, dtype=torch.float64) / (D // 2))
    ang = torch.outer(torch.arange(t, dtype=torch.float64), w)
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)


def rope_2d(x, h, w):
    """x [n, H, hd] (n = frames x h x w) -> rotated; pair 2i by the column, pair 2i+1 by the row, frequency
    10000^(-4i/hd); each frame alike."""
    n, H, hd = x.shape
    freqs = 10000.0 ** (-4.0 * torch.arange(hd // 4, dtype=torch.float64) / hd)
    rows = torch.arange(h, dtype=torch.float64).repeat_interleave(w).repeat(n // (h * w))
    cols = torch.arange(w, dtype=torch.float64).repeat(h).repeat(n // (h * w))
    ang = torch.stack([torch.outer(cols, freqs), torch.outer(rows, freqs)], dim=-1).reshape(n, hd // 2)
    cis = torch.polar(torch.ones_like(ang), ang).to(torch.complex128)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(n, H, hd // 2, 2).contiguous())
    out = torch.view_as_real(xc * cis[:, None, :]).reshape(n, H, hd)
    return out.to(x.dtype)


def encode(v, W, patches, grids):
    p, D = v["patch_size"], v["vt_hidden_size"]
    A, H = v["qkv_hidden_size"], v["vt_num_attention_heads"]
    hd = A // H
    kh, kw = v["merge_kernel_size"]
    L = patches.shape[0]
    grids = [tuple(g) if len(g) == 3 else (1,) + tuple(g) for g in grids]
    x = F.conv2d(patches.reshape(L, 3, p, p), W["vision_tower.patch_embed.proj.weight"],
                 W.get("vision_tower.patch_embed.proj.bias"), stride=p).reshape(L, D)
    table = W["vision_tower.patch_embed.pos_emb.weight"]  # [H0, W0, D]
    pos = []
    for t, h, w in grids:
        if (h, w) == tuple(table.shape[:2]):
            p2 = table.reshape(h * w, D)
        else:
            r = F.interpolate(table.permute(2, 0, 1)[None], size=(h, w), mode="bilinear", align_corners=False)
            p2 = r[0].permute(1, 2, 0).reshape(h * w, D)
        p3 = p2[None].repeat(t, 1, 1)
        if t > 1:
            p3 = p3 + time_embedding(t, D).to(p3.dtype)[:, None, :]
        pos.append(p3.reshape(t * h * w, D))
    x = x + torch.cat(pos)

    for layer in range(v["vt_num_hidden_layers"]):
        pre = f"vision_tower.encoder.blocks.{layer}."
        qkv = lin(W, tower_norm(v, W, x, pre + "norm0"), pre + "wqkv")
        q, k, val = qkv[:, :A], qkv[:, A:2 * A], qkv[:, 2 * A:]
        outs, start = [], 0
        for t, h, w in grids:
            n = t * h * w
            qi = rope_2d(q[start:start + n].reshape(n, H, hd), h, w).transpose(0, 1)  # [H, n, hd]
            ki = rope_2d(k[start:start + n].reshape(n, H, hd), h, w).transpose(0, 1)
            vi = val[start:start + n].reshape(n, H, hd).transpose(0, 1)
            prob = torch.softmax(qi @ ki.transpose(1, 2) / math.sqrt(hd), dim=-1)
            outs.append((prob @ vi).transpose(0, 1).reshape(n, A))
            start += n
        x = x + lin(W, torch.cat(outs), pre + "wo")
        x = x + lin(W, act(lin(W, tower_norm(v, W, x, pre + "norm1"), pre + "mlp.fc0"), v["activation_func"]),
                    pre + "mlp.fc1")
    x = tower_norm(v, W, x, "vision_tower.encoder.final_layernorm")

    merged, start = [], 0
    for t, h, w in grids:
        img = x[start:start + t * h * w].reshape(t, h // kh, kh, w // kw, kw, D).mean(0).permute(0, 2, 1, 3, 4)
        merged.append(img.reshape((h // kh) * (w // kw), kh * kw, D))
        start += t * h * w
    m = torch.cat(merged)
    if v["mm_projector_type"] == "patchmerger":  # Kimi-VL / K2.5: LayerNorm of each patch first
        m = F.layer_norm(m, (D,), W["mm_projector.pre_norm.weight"], W["mm_projector.pre_norm.bias"],
                         v["projector_ln_eps"])
    m = m.reshape(m.shape[0], kh * kw * D)
    y = lin(W, act(lin(W, m, "mm_projector.proj.0"), v["projector_hidden_act"]), "mm_projector.proj.2")
    if v["mm_projector_type"] == "patchmerger":
        return y
    return rms_norm(y, W["mm_projector.post_norm.weight"], v["projector_ln_eps"])  # K3's patchmergerv2
