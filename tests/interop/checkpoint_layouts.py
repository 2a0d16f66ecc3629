#!/usr/bin/env python3
"""Checkpoints in the layouts other projects publish, written here with PyTorch and safetensors (not by myriad),
read by myriad under its own names (src/infer/weight_layout.h).

usage: checkpoint_layouts.py MYRIAD_BINARY REPO_ROOT WORK_DIR   (ctest runs it with build/pyenv/bin/python)

Each model is first made in myriad's layout by the independent reference (tests/reference/kimi_ref.py init) with
its weights rounded to bf16 (kept f32): the REFERENCE. The same numbers are then written in a published layout:
  K3           K3's config.json nesting (text_config under model_type kimi_k3), every tensor under
               "language_model.", linear weights bf16, A_log F32 flat and padded to the head dim (as K3 ships it),
               the short convs [HK, W], plus vision_tower.* / mm_projector.* tensors the text model must ignore
  Kimi-Linear  Moonshot's release: flat kimi_linear config without gate_lower_bound (the softplus gate), bf16,
               A_log [1, 1, H, 1], the low-rank output gate
  transformers transformers 5's own kimi_linear (its modular code, as opposed to Moonshot's remote code): the
               KimiLinearConfig names (layer_types, mlp_layer_types, linear_num_key_heads, ...), KDA projections
               forget_gate_* / beta_proj / output_gate_*, one fused conv1d, experts fused as
               mlp.experts.gate_up_proj [E, 2F, D] / down_proj [E, D, F], A_log [H, 1], dt_bias [H, K]
  DeepSeek-V3  model_type deepseek_v3 with DeepSeek's field names (n_routed_experts, num_experts_per_tok,
               n_shared_experts, norm_topk_prob, scoring_func, n_group, topk_method), mlp.* names and experts'
               gate_proj / up_proj / down_proj, and the RoPE rows of q_b_proj and kv_a_proj_with_mqa stored
               interleaved (pairs 2i, 2i+1) as DeepSeek's checkpoints are, where the reference rotates halves
Checks:
  - `myriad convert --to transformers|deepseek-v3` of the reference writes exactly those tensors (names, shapes, bf16
    bits) and config fields, and reads back to the same logits; K3's features are refused with every reason;
  - `myriad logits` (the training forward: views, bf16 widened) on each equals `myriad logits` on the reference:
    bit for bit for K3, Kimi-Linear and transformers (the same f32 numbers through the same code), and within 1e-5 of the
    logits' scale for DeepSeek-V3 (the interleaved pairs sum q.k in another order: f32 reassociation only);
  - the serving path: `myriad generate` (greedy, 24 tokens) gives the same text on each as on the reference;
  - K3's MXFP4 routed experts read as stored: `myriad quantize --type mxfp4 --only experts` of the reference, its
    codes and scales renamed to compressed-tensors' weight_packed (U8) / weight_scale (F8_E8M0, written with a
    hand-made header since numpy has no such dtype) in the K3 layout, generate the same text as the quantized
    reference, and `myriad eval` gives the same perplexity;
  - a published layout with a tensor of the wrong shape fails with one error naming the stored tensor.
Prints every check; exits 1 on any mismatch.
"""

import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file

myriad, root, work = sys.argv[1:4]
sys.path.insert(0, os.path.join(root, "tests", "reference"))
import kimi_ref as R  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_checks import Checks, myriad_runner  # noqa: E402

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
check = Checks()
run = myriad_runner(myriad)


tiny = json.load(open(os.path.join(root, "configs", "tiny.json")))
text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
open(os.path.join(work, "text.txt"), "w").write(text)
tok_dir = os.path.join(work, "tok")
run("tokenizer", "train", "--data", os.path.join(work, "text.txt"), "--vocab", str(tiny["vocab_size"]), "--out",
    tok_dir)


def keep_f32(name):  # what published checkpoints keep in f32 (and myriad convert too)
    return name.endswith((".A_log", ".dt_bias", ".e_score_correction_bias"))


def reference(name, cfg, seed):
    """kimi_ref's random weights for cfg, rounded to bf16 (but keep_f32's), saved f32 in myriad's layout; returns
    (dir, weights)."""
    d = os.path.join(work, name + "-reference")
    os.makedirs(d)
    W = R.init_weights(R.Config(cfg), seed=seed, std=0.08)
    W = {k: v.float() if keep_f32(k) else v.to(torch.bfloat16).to(torch.float32) for k, v in W.items()}
    save_file({k: v.contiguous() for k, v in W.items()}, os.path.join(d, "model.safetensors"))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    shutil.copytree(tok_dir, os.path.join(d, "tokenizer"))
    return d, W


def publish(name, cfg, tensors):
    d = os.path.join(work, name)
    os.makedirs(d)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(d, "model.safetensors"))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    shutil.copytree(tok_dir, os.path.join(d, "tokenizer"))
    return d


tokens = "5,17,300,2,9,44,45,1,100,7,8,99,17,300,3,511,0,42,42,42"


def logits(d):
    out = d + ".logits.safetensors"
    run("logits", "--model", d, "--tokens", tokens, "--out", out)
    return load_file(out)["logits"]


def generate(d):
    return run("generate", "--model", d, "--prompt", "The model", "--max-tokens", "24").stdout


def compare(name, ref_dir, pub_dir, exact):
    a, b = logits(ref_dir), logits(pub_dir)
    if exact:
        check(np.array_equal(a, b), f"{name}: logits bit-identical to the reference's ({a.shape[0]} tokens)")
    else:
        err = float(np.max(np.abs(a - b))) / float(np.max(np.abs(a)))
        check(err <= 1e-5, f"{name}: logits within 1e-5 of the reference's scale (relative {err:.1e})")
    ga, gb = generate(ref_dir), generate(pub_dir)
    check(ga == gb and len(ga) > 0, f"{name}: generate (greedy, serving path) gives the reference's text")


# ------------------------------------------------------------------------------------------------ K3
k3_text = json.loads(json.dumps(tiny))
ref_dir, W = reference("k3", k3_text, 11)
H = k3_text["linear_attn_config"]["num_heads"]
K = k3_text["linear_attn_config"]["head_dim"]
pub = {}
for k, v in W.items():
    t = v.to(torch.bfloat16) if v.dim() >= 2 else v
    if k.endswith(".A_log"):  # K3 ships A_log F32 [head_dim] with the heads first
        t = torch.cat([v.float(), torch.zeros(K - H)])
    if k.endswith("_conv1d.weight"):
        t = t.reshape(t.shape[0], t.shape[2])
    pub["language_model." + k] = t
pub["vision_tower.patch_embed.proj.weight"] = torch.zeros(8, 3, 2, 2, dtype=torch.bfloat16)
pub["mm_projector.proj.0.weight"] = torch.zeros(4, 8, dtype=torch.bfloat16)
k3_cfg = {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"], "text_config": k3_text}
assert H < K, "the padded A_log needs head_dim > num_heads"
k3_dir = publish("k3", k3_cfg, pub)
from safetensors import safe_open  # noqa: E402

with safe_open(os.path.join(k3_dir, "model.safetensors"), "pt") as f:
    check(tuple(f.get_tensor("language_model.model.layers.0.self_attn.A_log").shape) == (K,),
          "K3 layout: A_log stored flat and padded")
compare("K3 layout (language_model., bf16, padded A_log, 2-D convs, vision tensors)", ref_dir, k3_dir, exact=True)

# K3's MXFP4 experts as stored.
refq = os.path.join(work, "k3-reference-mxfp4")
run("quantize", "--in", ref_dir, "--out", refq, "--type", "mxfp4", "--only", "experts")
q = load_file(os.path.join(refq, "model.safetensors"))
packed = {}
for k, v in pub.items():
    stem = k[len("language_model."):]
    if ".experts." in stem and stem.endswith(".weight"):
        base = k[: -len(".weight")]
        packed[base + ".weight_packed"] = ("U8", q[stem + ".qweight"])
        packed[base + ".weight_scale"] = ("F8_E8M0", q[stem + ".qscale"])
    else:
        t = v.contiguous()
        dt = {torch.float32: "F32", torch.bfloat16: "BF16"}[t.dtype]
        packed[k] = (dt, t.view(torch.int16).numpy() if dt == "BF16" else t.numpy())


def write_safetensors(path, named):
    """The format by hand (u64 header length, JSON header, data), for the F8_E8M0 dtype numpy cannot name."""
    header, blobs, off = {}, [], 0
    for name, (dt, arr) in named.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


k3q_dir = os.path.join(work, "k3-mxfp4")
os.makedirs(k3q_dir)
write_safetensors(os.path.join(k3q_dir, "model.safetensors"), packed)
json.dump(k3_cfg, open(os.path.join(k3q_dir, "config.json"), "w"), indent=1)
shutil.copytree(tok_dir, os.path.join(k3q_dir, "tokenizer"))
g_ref, g_pub = generate(refq), generate(k3q_dir)
check(g_ref == g_pub and len(g_ref) > 0, "K3 MXFP4 experts (weight_packed U8 / weight_scale F8_E8M0) generate the "
      "quantized reference's text")
data = os.path.join(work, "text.txt")
e_ref = run("eval", "--model", refq, "--data", data).stdout
e_pub = run("eval", "--model", k3q_dir, "--data", data).stdout


def perplexity(out):  # "DIR: N tokens, loss L nats, perplexity P (...)": the figures after the directory
    line = [x for x in out.splitlines() if "perplexity" in x]
    return line[0].split(": ", 1)[1] if line else None


check(perplexity(e_ref) is not None and perplexity(e_ref) == perplexity(e_pub),
      f"K3 MXFP4 experts: eval gives the quantized reference's loss and perplexity ({perplexity(e_ref)})")

# A stored tensor of the wrong shape: one error naming it.
bad = dict(pub)
bad["language_model.model.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 5, dtype=torch.bfloat16)
bad_dir = publish("k3-bad", k3_cfg, bad)
p = run("logits", "--model", bad_dir, "--tokens", tokens, "--out", os.path.join(work, "x.safetensors"), ok=False)
check(p.returncode != 0 and "language_model.model.layers.0.self_attn.q_proj.weight" in p.stderr
      and len(p.stderr.strip().splitlines()) == 1, f"a wrong shape is one error naming the stored tensor: "
      f"{p.stderr.strip()[:150]}")

# ------------------------------------------------------------------------------------------------ Kimi-Linear
kl = json.loads(json.dumps(tiny))
kl.update(hidden_act="silu", attn_res_mode="none", mla_use_output_gate=False)
for k in ("attn_res_block_size", "routed_expert_hidden_size", "latent_moe_use_norm"):
    kl.pop(k)
kl["linear_attn_config"].pop("gate_lower_bound")
kl["linear_attn_config"]["use_full_rank_gate"] = False
ref_dir, W = reference("kimi-linear", kl, 12)
pub = {k: (v.to(torch.bfloat16) if v.dim() >= 2 else v.reshape(1, 1, -1, 1) if k.endswith(".A_log") else v)
       for k, v in W.items()}
compare("Kimi-Linear layout (bf16, A_log [1, 1, H, 1], softplus gate)", ref_dir, publish("kimi-linear", kl, pub),
        exact=True)

# ------------------------------------------------------------------------------------------------ transformers
# transformers 5's own kimi_linear (its modular modeling code): KimiLinearConfig names, fused conv1d and experts.
la = kl["linear_attn_config"]
native_cfg = {k: v for k, v in kl.items() if k not in (
    "linear_attn_config", "num_experts", "num_experts_per_token", "num_shared_experts", "moe_renormalize",
    "first_k_dense_replace", "moe_layer_freq", "attn_res_mode", "mla_use_nope", "mla_use_output_gate", "balancing",
    "activation_situ_beta", "activation_situ_linear_beta", "router_init_std", "moe_router_activation_func",
    "topk_method", "media_placeholder_token_id")}
native_cfg.update(
    architectures=["KimiLinearForCausalLM"], linear_num_key_heads=la["num_heads"], linear_key_head_dim=la["head_dim"],
    linear_conv_kernel_dim=la["short_conv_kernel_size"], linear_num_value_heads=la["num_heads"],
    linear_value_head_dim=la["head_dim"], n_routed_experts=kl["num_experts"],
    num_experts_per_tok=kl["num_experts_per_token"], n_shared_experts=kl["num_shared_experts"],
    norm_topk_prob=kl["moe_renormalize"], n_group=1, topk_group=1,
    layer_types=["linear_attention" if l + 1 in la["kda_layers"] else "full_attention"
                 for l in range(kl["num_hidden_layers"])],
    mlp_layer_types=["dense" if l < kl["first_k_dense_replace"] else "sparse" for l in range(kl["num_hidden_layers"])])
native = {}
E = kl["num_experts"]
for k, v in W.items():
    t = v.to(torch.bfloat16) if v.dim() >= 2 else v
    if ".experts." in k or "_conv1d." in k:
        continue
    if k.endswith(".A_log"):
        t = v.reshape(-1, 1)
    if k.endswith(".dt_bias"):
        t = v.reshape(la["num_heads"], la["head_dim"])
    for a, b in ((".f_a_proj.", ".forget_gate_down."), (".f_b_proj.", ".forget_gate_up."), (".b_proj.", ".beta_proj."),
                 (".g_a_proj.", ".output_gate_down."), (".g_b_proj.", ".output_gate_up.")):
        if ".self_attn." in k:
            k = k.replace(a, b)
    native[k.replace(".block_sparse_moe.", ".mlp.")] = t
for l in range(kl["num_hidden_layers"]):
    p = f"model.layers.{l}."
    if l + 1 in la["kda_layers"]:
        native[p + "self_attn.conv1d.weight"] = torch.cat(
            [W[p + f"self_attn.{x}_conv1d.weight"] for x in "qkv"]).to(torch.bfloat16)
    if l >= kl["first_k_dense_replace"]:
        e = p + "block_sparse_moe.experts."
        native[p + "mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([W[e + f"{j}.w1.weight"], W[e + f"{j}.w3.weight"]]) for j in range(E)]).to(torch.bfloat16)
        native[p + "mlp.experts.down_proj"] = torch.stack([W[e + f"{j}.w2.weight"] for j in range(E)]).to(torch.bfloat16)
compare("transformers 5 kimi_linear layout (KimiLinearConfig names, fused conv1d and experts, A_log [H, 1], "
        "dt_bias [H, K])", ref_dir, publish("kimi-linear-transformers", native_cfg, native), exact=True)



def check_converted(name, ref_dir, target, want_tensors, want_config, exact):
    """`myriad convert --to target --dtype bf16` of the reference: exactly the tensors this script wrote for the
    layout (names, shapes, bf16 bits), the config fields it wrote, and the reference's logits when read back."""
    out = os.path.join(work, f"{name}-converted")
    run("convert", "--in", ref_dir, "--out", out, "--to", target, "--dtype", "bf16")
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        got = {k: f.get_tensor(k) for k in f.keys()}
    same_names = set(got) == set(want_tensors)
    check(same_names, f"{name}: convert --to {target} writes the layout's {len(want_tensors)} tensor names" +
          ("" if same_names else f": extra {sorted(set(got) - set(want_tensors))[:3]}, missing "
           f"{sorted(set(want_tensors) - set(got))[:3]}"))
    def as_stored(k, t):
        return t.float() if keep_f32(k) else t.to(torch.bfloat16)

    bad = [k for k in want_tensors if k in got and not (got[k].dtype == as_stored(k, want_tensors[k]).dtype and
                                                         got[k].shape == want_tensors[k].shape and
                                                         torch.equal(got[k], as_stored(k, want_tensors[k])))]
    check(not bad, f"{name}: every tensor's shape, dtype (bf16; A_log, dt_bias, correction bias f32) and values as "
          f"the layout stores them {bad[:3]}")
    cfg = json.load(open(os.path.join(out, "config.json")))
    diff = {k: (cfg.get(k), v) for k, v in want_config.items() if cfg.get(k) != v}
    check(not diff, f"{name}: config.json has the layout's fields {list(diff.items())[:3]}")
    compare(f"{name} written by convert, read back", ref_dir, out, exact)


check_converted("transformers kimi_linear", ref_dir, "transformers", native,
                {k: native_cfg[k] for k in ("model_type", "layer_types", "mlp_layer_types", "linear_num_key_heads",
                                            "linear_key_head_dim", "linear_conv_kernel_dim", "n_routed_experts",
                                            "num_experts_per_tok", "n_shared_experts", "norm_topk_prob",
                                            "kv_lora_rank", "q_lora_rank", "moe_intermediate_size")}, exact=True)
p = run("convert", "--in", os.path.join(work, "k3-reference"), "--out", os.path.join(work, "k3-tf"), "--to",
        "transformers", ok=False)
check(p.returncode != 0 and all(x in p.stderr for x in ("AttnRes", "latent MoE", "SiTU", "bounded KDA gate"))
      and not os.path.exists(os.path.join(work, "k3-tf")),
      f"convert --to transformers of K3's features: refused with every reason ({p.stderr.strip()[:100]}...)")
# myriad's own attention options: the target's modeling code attends densely with plain queries
own = os.path.join(work, "own-attention")
shutil.copytree(ref_dir, own)
own_cfg = json.load(open(os.path.join(ref_dir, "config.json")))
own_cfg.update(mla_logn_base=64, mla_sparse_attention={"block_size": 16, "top_k": 2, "window": 16})
json.dump(own_cfg, open(os.path.join(own, "config.json"), "w"), indent=1)
p = run("convert", "--in", own, "--out", os.path.join(work, "own-tf"), "--to", "transformers", ok=False)
check(p.returncode != 0 and "block-sparse MLA" in p.stderr and "log-n query scaling" in p.stderr
      and not os.path.exists(os.path.join(work, "own-tf")),
      f"convert --to transformers of sparse MLA and log-n scaling: refused naming both ({p.stderr.strip()[:100]}...)")

# ------------------------------------------------------------------------------------------------ DeepSeek-V3
ds_ref = json.loads(json.dumps(kl))
ds_ref.pop("linear_attn_config")
ds_ref.update(mla_use_nope=False, rope_theta=10000.0, topk_method="noaux_tc", moe_router_activation_func="sigmoid",
              routed_scaling_factor=2.5, num_experts_per_token=3)
ref_dir, W = reference("deepseek-v3", ds_ref, 13)
Hq, Dn, Dr, C = (ds_ref[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank"))


def interleave(w, row0):
    w = w.clone()
    old = w[row0:row0 + Dr].clone()
    w[row0:row0 + Dr:2], w[row0 + 1:row0 + Dr:2] = old[: Dr // 2], old[Dr // 2:]
    return w


pub = {}
for k, v in W.items():
    t = v.to(torch.bfloat16) if v.dim() >= 2 else v
    if k.endswith("q_b_proj.weight"):
        for h in range(Hq):
            t = interleave(t, h * (Dn + Dr) + Dn)
    if k.endswith("kv_a_proj_with_mqa.weight"):
        t = interleave(t, C)
    k = k.replace(".block_sparse_moe.", ".mlp.")
    for a, b in ((".w1.weight", ".gate_proj.weight"), (".w3.weight", ".up_proj.weight"),
                 (".w2.weight", ".down_proj.weight")):
        if ".experts." in k and k.endswith(a):
            k = k[: -len(a)] + b
    pub[k] = t
ds = {k: v for k, v in ds_ref.items() if k not in (
    "num_experts", "num_experts_per_token", "num_shared_experts", "moe_renormalize", "moe_router_activation_func",
    "hidden_act", "attn_res_mode", "balancing", "activation_situ_beta", "activation_situ_linear_beta",
    "router_init_std", "media_placeholder_token_id", "mla_use_nope", "mla_use_output_gate")}
ds.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"], n_routed_experts=ds_ref["num_experts"],
          num_experts_per_tok=ds_ref["num_experts_per_token"], n_shared_experts=ds_ref["num_shared_experts"],
          norm_topk_prob=ds_ref["moe_renormalize"], scoring_func="sigmoid", n_group=1, topk_group=1,
          hidden_act="silu", ep_size=1, num_nextn_predict_layers=0)
compare("DeepSeek-V3 layout (deepseek_v3 config names, mlp.*, gate/up/down_proj experts, interleaved RoPE rows)",
        ref_dir, publish("deepseek-v3", ds, pub), exact=False)
ds_grouped = dict(ds, n_group=2, topk_group=1)
p = run("logits", "--model", publish("deepseek-v3-grouped", ds_grouped, pub), "--tokens", tokens, "--out",
        os.path.join(work, "y.safetensors"), ok=False)
check(p.returncode != 0 and "n_group" in p.stderr, f"deepseek_v3 with n_group 2 (group-limited routing) refused: "
      f"{p.stderr.strip()[:120]}")
check_converted("DeepSeek-V3", ref_dir, "deepseek-v3", pub,
                {k: ds[k] for k in ("model_type", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
                                    "norm_topk_prob", "scoring_func", "first_k_dense_replace", "qk_rope_head_dim")},
                exact=False)

check.finish("checkpoint layouts")
