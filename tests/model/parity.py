#!/usr/bin/env python3
"""Parity of myriad's C++ model with the independent float64 PyTorch reference (tests/reference/kimi_ref.py).

For each config variant: the reference writes random weights; `myriad logits --grads` and `kimi_ref.py run`
(float64) compute logits, loss and every parameter gradient from the same safetensors file; all must agree.

Tolerance, per tensor: max |myriad - ref| <= 1e-3 * max |ref| + 1e-6. myriad computes in f32 through a few
layers of sums (observed worst ~6e-5 of the tensor's scale); a missing term, a wrong transpose or a mis-wired
gradient is off by O(1) of the scale, so the bound separates them by more than an order of magnitude.

usage: parity.py MYRIAD_BINARY REPO_ROOT WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file

myriad, root, work = sys.argv[1:4]
py = sys.executable
ref = os.path.join(root, "tests", "reference", "kimi_ref.py")
os.makedirs(work, exist_ok=True)
tiny = json.load(open(os.path.join(root, "configs", "tiny.json")))


NULL = object()  # a field written as JSON null (None drops the field)


def variant(name, **changes):
    c = json.loads(json.dumps(tiny))
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = None if v is NULL else v
    return name, c


variants = [
    variant("tiny"),
    variant("tiny-rope-yarn", mla_use_nope=False, rope_theta=10000.0,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                          "beta_fast": 4.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.5}),
    variant("tiny-no-attnres", attn_res_mode="none"),
    variant("tiny-plain", q_lora_rank=None, routed_expert_hidden_size=None, hidden_act="silu",
            moe_router_activation_func="softmax", routed_scaling_factor=2.5, attn_res_block_size=3),
    # config paths where upstream's reading differs from a naive one: top-1 routing with moe_renormalize (no
    # renormalisation with one expert), the low-rank KDA output gate, and an unclamped SiTU up projection
    variant("tiny-upstream-paths", num_experts_per_token=1, moe_renormalize=True, activation_situ_linear_beta=NULL,
            linear_attn_config=dict(tiny["linear_attn_config"], use_full_rank_gate=False)),
    # DeepSeek-V3's interleaved RoPE pairs (2i, 2i+1); the reference de-interleaves as DeepSeek's modeling code does
    variant("tiny-rope-interleaved", mla_use_nope=False, rope_theta=10000.0, rope_interleave=True),
    # no gate_lower_bound: Kimi-Linear's unbounded softplus KDA gate
    variant("tiny-softplus-gate",
            linear_attn_config={k: v for k, v in tiny["linear_attn_config"].items() if k != "gate_lower_bound"}),
]
tokens = [5, 17, 300, 2, 9, 44, 45, 1, 100, 7, 8, 99, 17, 300, 3, 511, 0, 42, 42, 42]
targets = tokens[1:] + [-100]
targets[5] = -100
tok = ",".join(map(str, tokens))
tgt = ",".join(map(str, targets))
failures = 0
for name, cfg in variants:
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cfg_path = os.path.join(d, "config.json")
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    subprocess.run([py, ref, "init", "--config", cfg_path, "--out", os.path.join(d, "model"), "--seed", "7",
                    "--std", "0.08"], check=True, stdout=subprocess.DEVNULL)
    mine, theirs = os.path.join(d, "myriad.safetensors"), os.path.join(d, "reference.safetensors")
    # chunk 8 over 20 tokens: several chunks and a partial one
    subprocess.run([myriad, "logits", "--model", os.path.join(d, "model"), "--tokens", tok, "--targets", tgt,
                    "--grads", "--chunk", "8", "--out", mine], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([py, ref, "run", "--model", os.path.join(d, "model"), "--tokens", tok, "--targets", tgt,
                    "--out", theirs, "--dtype", "f64"], check=True, stdout=subprocess.DEVNULL)
    a, b = load_file(mine), load_file(theirs)
    if name == "tiny":
        # Gradient checkpointing recomputes each layer in backward: the same operations, but a layer's input
        # gradient is summed in a different order (recompute leaf first, then added), so f32 reassociation
        # only: per tensor, max difference <= 1e-5 of the tensor's scale.
        ck = os.path.join(d, "myriad-checkpointed.safetensors")
        subprocess.run([myriad, "logits", "--model", os.path.join(d, "model"), "--tokens", tok, "--targets", tgt,
                        "--grads", "--chunk", "8", "--checkpoint", "--out", ck], check=True, stdout=subprocess.DEVNULL)
        c = load_file(ck)
        diff = max(float(np.max(np.abs(c[k] - a[k])) / (np.max(np.abs(a[k])) + 1e-12)) if a[k].size else 0.0
                   for k in a)
        if set(c) != set(a) or diff > 1e-5:
            print(f"FAIL {name}: checkpointed run differs from the plain one by {diff:.3e}")
            failures += 1
        else:
            print(f"ok   {name}: gradient checkpointing gives the same logits, loss and gradients (max relative diff {diff:.1e})")
    if set(a) != set(b):
        print(f"FAIL {name}: tensors differ: only myriad {sorted(set(a) - set(b))[:5]}, "
              f"only reference {sorted(set(b) - set(a))[:5]}")
        failures += 1
        continue
    worst = (0.0, "")
    bad = []
    for k in sorted(b):
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        if x.shape != y.shape:
            bad.append(f"{k}: shape {x.shape} vs {y.shape}")
            continue
        if y.size == 0:
            continue
        scale = float(np.max(np.abs(y)))
        err = float(np.max(np.abs(x - y)))
        if err > 1e-3 * scale + 1e-6:
            bad.append(f"{k}: max error {err:.3e} at scale {scale:.3e}")
        if scale > 0 and err / scale > worst[0]:
            worst = (err / scale, k)
    ngrad = sum(k.startswith("grad.") for k in b)
    if bad:
        failures += 1
        print(f"FAIL {name}: {len(bad)} tensors out of tolerance:")
        for line in bad[:10]:
            print("   ", line)
    else:
        print(f"ok   {name}: logits, loss ({float(a['loss']):.6f}) and {ngrad} parameter gradients agree; "
              f"worst relative error {worst[0]:.1e} ({worst[1]})")
sys.exit(1 if failures else 0)
