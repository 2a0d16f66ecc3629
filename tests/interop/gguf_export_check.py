#!/usr/bin/env python3
"""`myriad export gguf` read back with PyPI's gguf package (the reader llama.cpp's own tools use).

usage: gguf_export_check.py MYRIAD_BINARY REPO_ROOT WORK_DIR   (ctest runs it with build/pyenv/bin/python)

Three random models written by `myriad init` with a trained myriad tokenizer:
  kimi-linear  KDA + NoPE MLA + MoE, the softplus KDA gate and the low-rank output gate (Kimi-Linear's shape)
  kimi-k3      configs/tiny.json as it is (AttnRes, latent MoE, SiTU, both gates, q_lora_rank): K3's shape
  deepseek2    all-MLA with RoPE and YaRN scaling, a q_lora-less layer set (DeepSeek-V2-Lite's q_proj path) + MoE
each exported as f32, q8_0 and q4_0. For every file:
  - the architecture, and every hyperparameter key (names from gguf.Keys) against config.json;
  - the tensor set: each checkpoint tensor's GGUF name computed by gguf's own TensorNameMap for the architecture
    (after the renames llama.cpp's converter makes: dt_bias -> dt_proj.bias, e_score_correction_bias ->
    e_score_correction.bias, the experts stacked, kv_b_proj split into k_b_proj / v_b_proj); nothing more, nothing
    less. gguf 0.19 has no kimi-k3 architecture yet: its file is named by kimi-linear's map plus the names
    llama.cpp's src/llama-arch.cpp gives K3's own tensors (attn_res_score, ffn_res_score, output_res_score,
    ffn_routed_{down,up,norm}, ssm_g, attn_gate), and checked the same way;
  - every tensor's values, recomputed here with numpy from the safetensors file (stacking, the kv_b split and
    transpose, -exp(A_log), the conv reshape, deepseek2's rotate-half -> interleaved RoPE rows): f32 tensors equal
    bit for bit; quantized ones byte-equal to gguf.quants.quantize of the same values (ggml's reference
    quantizer), which also checks which tensors are quantized (a kept-f32 tensor would have another type);
  - the vocabulary: every id's piece and type against myriad's tokenizer (byte tokens BYTE, reserved specials
    CONTROL, ids of a text's pieces from `myriad tokenizer encode --pieces`).
The published tokenizer kinds (tests/interop/tokenizer_fixtures.py: Kimi's tiktoken, DeepSeek-V3's, Llama 3's and
Qwen 2's tokenizer.json, written by PyPI's tiktoken / tokenizers) exported as llama.cpp's "gpt2" vocabulary: the
pre-tokenizer's name, every token's ByteLevel string against the reference's bytes, added tokens CONTROL, and the
merges: each "a b" names two tokens whose bytes make a third of a later rank, and a textbook BPE over the file's
merges rebuilds every multi-byte token from its bytes (tiktoken's tokens it cannot reach in rank order aside).
Then the refusals: tiny.json with what neither kimi format carries (SwiGLU with AttnRes skip and the low-rank KDA
gate, RoPE MLA) exits non-zero with one message naming each reason of both formats, and nothing is written.

Prints every check; exits 1 on any mismatch.
"""

import json
import os
import shutil
import sys

import gguf
import gguf.quants
import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_checks import Checks, myriad_runner, randomize_constant_inits  # noqa: E402

myriad, root, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
check = Checks()
run = myriad_runner(myriad)


tiny = json.load(open(os.path.join(root, "configs", "tiny.json")))


def kimi_linear_config():
    c = json.loads(json.dumps(tiny))
    c.update(hidden_act="silu", attn_res_mode="none", mla_use_output_gate=False, q_lora_rank=None)
    for k in ("attn_res_block_size", "routed_expert_hidden_size", "latent_moe_use_norm"):
        c.pop(k)
    c["linear_attn_config"].pop("gate_lower_bound")  # the unbounded softplus gate
    c["linear_attn_config"]["use_full_rank_gate"] = False
    return c


def deepseek2_config():
    c = kimi_linear_config()
    c.pop("linear_attn_config")
    c.update(mla_use_nope=False, rope_theta=10000.0, q_lora_rank=None, num_experts_per_token=3,
             moe_router_activation_func="softmax", topk_method="greedy", routed_scaling_factor=2.5,
             rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512,
                           "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707})
    return c


# ---------------------------------------------------------------------------------------------- the models
text = "".join(open(os.path.join(root, f), encoding="utf-8").read()
               for f in ["README.md", "docs/tensors.md", "docs/params.md"])
open(os.path.join(work, "text.txt"), "w").write(text)
tok_dir = os.path.join(work, "tok")
run("tokenizer", "train", "--data", os.path.join(work, "text.txt"), "--vocab", "512", "--out", tok_dir)
tok_meta = json.load(open(os.path.join(tok_dir, "tokenizer.json")))


models = {}
for arch, cfg in (("kimi-linear", kimi_linear_config()), ("kimi-k3", tiny), ("deepseek2", deepseek2_config())):
    d = os.path.join(work, arch)
    os.makedirs(d)
    cfg_path = os.path.join(d, "config.in.json")
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    run("init", "--config", cfg_path, "--out", os.path.join(d, "model"), "--seed", "5")
    shutil.copytree(tok_dir, os.path.join(d, "model", "tokenizer"))
    models[arch] = (os.path.join(d, "model"), cfg)
    randomize_constant_inits(os.path.join(d, "model", "model.safetensors"), 11)


# ---------------------------------------------------------------------------------------------- expectations
def expected_tensors(arch, cfg, W):
    """GGUF name -> float32 numpy array in PyTorch order (GGUF's ne reversed), from the checkpoint W."""
    n_layers = cfg["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.DEEPSEEK2 if arch == "deepseek2" else
                                    gguf.MODEL_ARCH.KIMI_LINEAR, n_layers)
    full_attn = cfg.get("linear_attn_config", {}).get("full_attn_layers", [])

    def k3_name(hf):  # K3's own tensors (llama.cpp's src/llama-arch.cpp), None for the rest
        parts = hf.split(".")
        blk = f"blk.{parts[2]}." if parts[1] == "layers" else ""
        for suffix, g in (("routed_expert_down_proj.weight", "ffn_routed_down.weight"),
                          ("routed_expert_up_proj.weight", "ffn_routed_up.weight"),
                          ("routed_expert_norm.weight", "ffn_routed_norm.weight")):
            if hf.endswith(suffix):
                return blk + g
        if hf.endswith("self_attn.g_proj.weight"):
            return blk + ("attn_gate.weight" if int(parts[2]) + 1 in full_attn else "ssm_g.weight")
        return None

    def gname(hf):
        g = k3_name(hf) if arch == "kimi-k3" else None
        g = g or tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert g is not None, f"gguf has no name for {hf}"
        return g

    H, Dn, Dr, Dv = (cfg[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    C = cfg["kv_lora_rank"]

    def interleave(w, row0):  # rotate-half pairs (i, i + Dr/2) -> (2i, 2i + 1) on rows [row0, row0 + Dr)
        w = w.copy()
        half = Dr // 2
        old = w[row0:row0 + Dr].copy()
        w[row0:row0 + Dr:2] = old[:half]
        w[row0 + 1:row0 + Dr:2] = old[half:]
        return w

    out = {}
    experts = {}
    res = {}  # kimi-k3: AttnRes query prefix -> {"norm": .., "proj": ..}
    for hf, w in W.items():
        w = w.astype(np.float32)
        if "_res_norm." in hf or "_res_proj." in hf:
            assert arch == "kimi-k3", hf
            prefix, kind = hf.rsplit("_res_", 1)
            res.setdefault(prefix, {})[kind.split(".")[0]] = w.reshape(-1)
            continue
        if ".experts." in hf:
            layer, e, which = hf.split(".")[2], int(hf.split(".")[5]), hf.split(".")[6]
            experts.setdefault((layer, which), {})[e] = w
            continue
        if hf.endswith(".dt_bias"):
            hf = hf[: -len("dt_bias")] + "dt_proj.bias"
        if hf.endswith(".e_score_correction_bias"):
            hf = hf[: -len("e_score_correction_bias")] + "e_score_correction.bias"
        if hf.endswith(".A_log"):
            a = (-np.exp(w.astype(np.float64))).astype(np.float32)
            out[gname(hf)] = a.reshape(-1) if arch == "kimi-k3" else a.reshape(1, 1, -1, 1)
        elif "_conv1d." in hf:  # [HK, 1, W] -> [1, HK, 1, W]
            out[gname(hf)] = w.reshape(1, w.shape[0], 1, w.shape[2])
        elif hf.endswith("kv_b_proj.weight"):
            kv = w.reshape(H, Dn + Dv, C)
            out[gname(hf.replace("kv_b_proj", "k_b_proj"))] = np.ascontiguousarray(kv[:, :Dn, :].transpose(0, 2, 1))
            out[gname(hf.replace("kv_b_proj", "v_b_proj"))] = np.ascontiguousarray(kv[:, Dn:, :])
        elif arch == "deepseek2" and (hf.endswith("q_b_proj.weight") or hf.endswith("self_attn.q_proj.weight")):
            for h in range(H):
                w = interleave(w, h * (Dn + Dr) + Dn)
            out[gname(hf)] = w
        elif arch == "deepseek2" and hf.endswith("kv_a_proj_with_mqa.weight"):
            out[gname(hf)] = interleave(w, C)
        else:
            out[gname(hf)] = w
    for (layer, which), by_e in experts.items():
        stacked = np.stack([by_e[e] for e in range(len(by_e))])
        out[gname(f"model.layers.{layer}.block_sparse_moe.experts.{which}.weight")] = stacked
    for prefix, parts in res.items():  # the score vector is the product of the query's norm weight and projection
        if prefix == "model.output_attn":
            name = "output_res_score.weight"
        else:
            layer = prefix.split(".")[2]
            name = f"blk.{layer}." + ("attn_res_score.weight" if prefix.endswith("self_attention") else
                                      "ffn_res_score.weight")
        out[name] = parts["norm"] * parts["proj"]
    if arch == "kimi-k3" and cfg.get("tie_word_embeddings"):
        out["output.weight"] = W["model.embed_tokens.weight"].astype(np.float32)
    return out


KEEP_F32 = ("ffn_gate_inp", "ssm_conv1d", "ssm_a")  # llama.cpp's always-f32 tensors among the 2-D+ ones


def expected_type(name, arr, qtype):
    if qtype == "f32" or arr.ndim < 2 or any(k in name for k in KEEP_F32) or arr.shape[-1] % 32:
        return gguf.GGMLQuantizationType.F32
    return {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}[qtype]


def field(r, key):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def check_metadata(r, arch, cfg, qtype, tag):
    A = arch
    check(field(r, gguf.Keys.General.ARCHITECTURE) == arch, f"{tag}: general.architecture = {arch}")
    check(field(r, gguf.Keys.General.FILE_TYPE) == {"f32": 0, "q8_0": 7, "q4_0": 2}[qtype], f"{tag}: file_type")
    has_moe = cfg["num_experts"] > 0
    want = {
        gguf.Keys.LLM.VOCAB_SIZE: cfg["vocab_size"],
        gguf.Keys.LLM.CONTEXT_LENGTH: cfg["max_position_embeddings"],
        gguf.Keys.LLM.EMBEDDING_LENGTH: cfg["hidden_size"],
        gguf.Keys.LLM.FEED_FORWARD_LENGTH: cfg["intermediate_size"],
        gguf.Keys.LLM.BLOCK_COUNT: cfg["num_hidden_layers"],
        gguf.Keys.Attention.HEAD_COUNT: cfg["num_attention_heads"],
        gguf.Keys.Attention.KV_LORA_RANK: cfg["kv_lora_rank"],
        gguf.Keys.Attention.KEY_LENGTH: cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"],
        gguf.Keys.Attention.KEY_LENGTH_MLA: cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"],
        gguf.Keys.Attention.VALUE_LENGTH_MLA: cfg["v_head_dim"],
        gguf.Keys.Rope.DIMENSION_COUNT: cfg["qk_rope_head_dim"],
        gguf.Keys.LLM.LEADING_DENSE_BLOCK_COUNT: cfg["first_k_dense_replace"],
        gguf.Keys.LLM.EXPERT_COUNT: cfg["num_experts"],
        gguf.Keys.LLM.EXPERT_USED_COUNT: cfg["num_experts_per_token"],
        gguf.Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: cfg["moe_intermediate_size"],
        gguf.Keys.LLM.EXPERT_SHARED_COUNT: cfg["num_shared_experts"],
        gguf.Keys.LLM.EXPERT_GATING_FUNC: (gguf.ExpertGatingFuncType.SIGMOID if cfg["moe_router_activation_func"]
                                           == "sigmoid" else gguf.ExpertGatingFuncType.SOFTMAX).value,
        gguf.Keys.LLM.EXPERT_WEIGHTS_NORM: bool(cfg["moe_renormalize"] and cfg["num_experts_per_token"] > 1),
    }
    assert has_moe
    floats = {
        gguf.Keys.Attention.LAYERNORM_RMS_EPS: cfg["rms_norm_eps"],
        gguf.Keys.LLM.EXPERT_WEIGHTS_SCALE: cfg["routed_scaling_factor"],
    }
    if cfg.get("q_lora_rank") is not None:
        want[gguf.Keys.Attention.Q_LORA_RANK] = cfg["q_lora_rank"]
    if arch == "kimi-k3":
        want[gguf.Keys.Attention.VALUE_LENGTH] = cfg["kv_lora_rank"]
        want["{arch}.attn_res.block_size"] = cfg["attn_res_block_size"] if cfg["attn_res_mode"] == "block" else 0
        want["{arch}.expert_latent_length"] = cfg["routed_expert_hidden_size"]
        floats["{arch}.activation.situ_beta"] = cfg["activation_situ_beta"]
        floats["{arch}.activation.situ_linear_beta"] = cfg["activation_situ_linear_beta"]
        floats["{arch}.kda.gate_lower_bound"] = cfg["linear_attn_config"]["gate_lower_bound"]
    if arch != "deepseek2":
        la = cfg["linear_attn_config"]
        want[gguf.Keys.SSM.CONV_KERNEL] = la["short_conv_kernel_size"]
        want["{arch}.kda.head_dim"] = la["head_dim"]
        kv = [1 if (l + 1) in la["full_attn_layers"] else 0 for l in range(cfg["num_hidden_layers"])]
        check(field(r, gguf.Keys.Attention.HEAD_COUNT_KV.format(arch=A)) == kv,
              f"{tag}: head_count_kv per layer {kv} (1 for MLA, 0 for KDA)")
    else:
        want[gguf.Keys.Attention.HEAD_COUNT_KV] = 1
        want[gguf.Keys.Attention.VALUE_LENGTH] = cfg["kv_lora_rank"]
        rs = cfg["rope_scaling"]
        want[gguf.Keys.Rope.SCALING_TYPE] = "yarn"
        want[gguf.Keys.Rope.SCALING_ORIG_CTX_LEN] = rs["original_max_position_embeddings"]
        floats[gguf.Keys.Rope.SCALING_FACTOR] = rs["factor"]
        floats[gguf.Keys.Rope.SCALING_YARN_LOG_MUL] = 0.1 * rs["mscale_all_dim"]
        floats[gguf.Keys.Rope.FREQ_BASE] = cfg["rope_theta"]
    bad = [f"{k.format(arch=A)} = {field(r, k.format(arch=A))!r}, want {v!r}" for k, v in want.items()
           if field(r, k.format(arch=A)) != v]
    bad += [f"{k.format(arch=A)} = {field(r, k.format(arch=A))!r}, want {v!r}" for k, v in floats.items()
            if field(r, k.format(arch=A)) is None or abs(field(r, k.format(arch=A)) - v) > 1e-6 * max(1, abs(v))]
    check(not bad, f"{tag}: {len(want) + len(floats)} hyperparameter keys = config.json" + (f": {bad}" if bad else ""))


def check_vocabulary(r, model_dir, tag):
    tokens = field(r, gguf.Keys.Tokenizer.LIST)
    types = field(r, gguf.Keys.Tokenizer.TOKEN_TYPE)
    scores = field(r, gguf.Keys.Tokenizer.SCORES)
    check(field(r, gguf.Keys.Tokenizer.MODEL) == "llama", f"{tag}: tokenizer.ggml.model llama")
    V = tok_meta["vocab_size"]
    check(len(tokens) == len(types) == len(scores) == V, f"{tag}: {V} tokens, types, scores")
    first_byte = tok_meta["byte_fallback_first_id"]
    bytes_ok = all(tokens[first_byte + b] == f"<0x{b:02X}>" and types[first_byte + b] == gguf.TokenType.BYTE
                   for b in range(256))
    check(bytes_ok, f"{tag}: the 256 byte-fallback tokens <0xNN> at ids {first_byte}.. are BYTE")
    specials = {n: i for n, i in tok_meta["special_tokens"].items() if n != "<unk>"}
    check(all(tokens[i] == n and types[i] == gguf.TokenType.CONTROL for n, i in specials.items()),
          f"{tag}: {len(specials)} specials by name and id, CONTROL")
    unk = tok_meta["special_tokens"]["<unk>"]
    check(types[unk] == gguf.TokenType.UNKNOWN and field(r, gguf.Keys.Tokenizer.UNK_ID) == unk, f"{tag}: <unk>")
    check(field(r, gguf.Keys.Tokenizer.EOT_ID) == tok_meta["special_tokens"]["<|endoftext|>"], f"{tag}: eot id")
    p = run("tokenizer", "encode", "--tokenizer", os.path.join(model_dir, "tokenizer"), "--pieces",
            "--text", "The tensors of docs/tensors.md, 12345 \u00e9t\u00e9 \u2603")
    pairs = [line.split("\t", 1) for line in p.stdout.splitlines() if "\t" in line]
    check(pairs and all(tokens[int(i)] == piece for i, piece in pairs),
          f"{tag}: the pieces of a text ({len(pairs)} ids) are the GGUF tokens of their ids")
    normal = [i for i, t in enumerate(types) if t == gguf.TokenType.NORMAL]
    check(len(normal) == V - len(tok_meta["special_tokens"]) - 256 and all(np.isfinite(scores)),
          f"{tag}: every other token NORMAL ({len(normal)}), scores finite")


def check_file(arch, qtype):
    model_dir, cfg = models[arch]
    out = os.path.join(work, f"{arch}-{qtype}.gguf")
    p = run("export", "gguf", "--model", model_dir, "--out", out, "--type", qtype, "--name", f"test-{arch}")
    tag = f"{arch} {qtype}"
    print(f"     {p.stdout.strip()}")
    r = gguf.GGUFReader(out)
    check(field(r, gguf.Keys.General.NAME) == f"test-{arch}", f"{tag}: general.name from --name")
    check_metadata(r, arch, cfg, qtype, tag)
    check_vocabulary(r, model_dir, tag)
    W = load_file(os.path.join(model_dir, "model.safetensors"))
    want = expected_tensors(arch, cfg, W)
    got = {t.name: t for t in r.tensors}
    check(set(got) == set(want), f"{tag}: {len(want)} tensors named as gguf's TensorNameMap names them" +
          ("" if set(got) == set(want) else f": only in file {sorted(set(got) - set(want))[:4]}, missing "
           f"{sorted(set(want) - set(got))[:4]}"))
    bad_shape, bad_type, bad_data, quantized = [], [], [], 0
    for name, arr in want.items():
        t = got.get(name)
        if t is None:
            continue
        if list(t.shape) != list(reversed(arr.shape)):
            bad_shape.append(f"{name}: ne {list(t.shape)} for {list(arr.shape)}")
            continue
        qt = expected_type(name, arr, qtype)
        if t.tensor_type != qt:
            bad_type.append(f"{name}: {t.tensor_type.name}, want {qt.name}")
            continue
        if qt == gguf.GGMLQuantizationType.F32:
            same = np.array_equal(np.asarray(t.data).reshape(arr.shape), arr)
        else:
            quantized += 1
            ref = gguf.quants.quantize(arr.reshape(-1, arr.shape[-1]), qt)
            same = np.array_equal(np.asarray(t.data).reshape(ref.shape), ref)
        if not same:
            bad_data.append(name)
    check(not bad_shape, f"{tag}: every shape is the checkpoint's (converted) shape reversed {bad_shape[:3]}")
    check(not bad_type, f"{tag}: every tensor's type ({quantized} quantized) {bad_type[:3]}")
    check(not bad_data, f"{tag}: every tensor's bytes equal numpy's recomputation "
                        f"(quantized: gguf.quants.quantize, ggml's reference) {bad_data[:3]}")
    if qtype != "f32":
        # Round trip through gguf's dequantizer: the block format's error, nothing more. Codes are rounded with the
        # f32 scale d, values rebuilt with d rounded to f16 (relative 2^-11, times a code of up to 127 or 8).
        # Q8_0: d = amax / 127, |err| <= d / 2 + 127 d 2^-11. Q4_0: |d| = amax / 8, |err| <= |d| / 2, except the
        # clamp of the top code (x d^-1 = +8 -> code 15 = 7 d): |err| <= |d| (1 + 8 * 2^-11).
        worst = 0.0
        for name, arr in want.items():
            t = got[name]
            if t.tensor_type == gguf.GGMLQuantizationType.F32:
                continue
            back = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(arr.shape)
            blocks = np.abs(arr.reshape(-1, 32)).max(axis=1)
            err = np.abs(back - arr).reshape(-1, 32).max(axis=1)
            worst = max(worst, float(np.max(err / np.maximum(blocks, 1e-30))))
        bound = (0.5 + 127 * 2**-11) / 127 if qtype == "q8_0" else (1 + 8 * 2**-11) / 8
        bound *= 1 + 1e-6  # the f32 arithmetic of the comparison itself
        check(worst <= bound, f"{tag}: dequantized error <= {bound:.4f} of each block's max |x| (worst {worst:.4f})")


for arch in ("kimi-linear", "kimi-k3", "deepseek2"):
    for qtype in ("f32", "q8_0", "q4_0"):
        check_file(arch, qtype)

# ---------------------------------------------------------------------------------------------- refusals
d = os.path.join(work, "neither")
neither = json.loads(json.dumps(tiny))
neither.update(hidden_act="silu", attn_res_mode="skip", mla_use_nope=False, mla_logn_base=256,
               mla_sparse_attention={"block_size": 64, "top_k": 4, "window": 64})
neither["linear_attn_config"]["use_full_rank_gate"] = False
json.dump(neither, open(os.path.join(work, "neither.json"), "w"))
run("init", "--config", os.path.join(work, "neither.json"), "--out", os.path.join(d, "model"))
shutil.copytree(tok_dir, os.path.join(d, "model", "tokenizer"))
out = os.path.join(work, "neither.gguf")
p = run("export", "gguf", "--model", os.path.join(d, "model"), "--out", out, ok=False)
msg = p.stderr.strip()
check(p.returncode != 0 and not os.path.exists(out), "a config neither kimi format carries: refused, nothing written")
k3_part, _, linear_part = msg.partition("(and kimi-linear:")
for feature in ("attn_res_mode skip", "SwiGLU", "low-rank KDA output gate", "RoPE on MLA", "block-sparse MLA",
                "log-n query scaling"):
    check(feature in k3_part, f"the refusal names '{feature}' for kimi-k3")
for feature in ("AttnRes", "latent MoE", "MLA output gate", "bounded KDA gate", "RoPE on MLA", "block-sparse MLA",
                "log-n query scaling"):
    check(feature in linear_part, f"the refusal names '{feature}' for kimi-linear")
check(len(msg.splitlines()) == 1, f"one error line: {msg[:160]}...")
p = run("export", "gguf", "--model", models["kimi-linear"][0], "--out", out, "--type", "q5_k", ok=False)
check(p.returncode != 0 and "q5_k" in p.stderr and not os.path.exists(out), "--type q5_k refused by name")
check(not [f for f in os.listdir(work) if ".tmp" in f], "no temporary files left")


# ---------------------------------------------------------------------------------------------- BPE vocabularies
import tokenizer_fixtures as fx  # noqa: E402

BYTE_CHAR = {}
_printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
_extra = 0
for _b in range(256):  # GPT-2's bytes_to_unicode
    if _b in _printable:
        BYTE_CHAR[_b] = chr(_b)
    else:
        BYTE_CHAR[_b] = chr(256 + _extra)
        _extra += 1


def byte_level(bs):
    return "".join(BYTE_CHAR[b] for b in bs)


def textbook_bpe(word, ranks):
    """Merges adjacent symbols by the lowest merge rank, leftmost first, until none applies."""
    syms = list(word)
    while len(syms) > 1:
        best = min(((ranks.get((syms[i], syms[i + 1]), 1 << 60), i) for i in range(len(syms) - 1)))
        if best[0] == 1 << 60:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    return syms


lines = fx.training_lines(os.path.join(root, "..", "shared"))[:4000] + fx.MULTILINGUAL * 10
vocab_fixtures = {}
ll = os.path.join(work, "tok-llama3")
ref = fx.build_llama3(ll, lines)
vocab_fixtures["llama-bpe"] = (ll, ref.get_vocab_size(with_added_tokens=True), lambda i, r=ref: r.id_to_token(i))
for pre, build, name in (("deepseek-v3", fx.build_deepseek, "deepseek"), ("qwen2", fx.build_qwen, "qwen")):
    d = os.path.join(work, "tok-" + name)
    ref = build(d, lines)
    vocab_fixtures[pre] = (d, ref.get_vocab_size(with_added_tokens=True), lambda i, r=ref: r.id_to_token(i))
kimi_enc = fx.build_kimi(os.path.join(work, "tok-kimi"), ll)
vocab_fixtures["kimi-k2"] = (os.path.join(work, "tok-kimi"), kimi_enc.n_vocab, None)
for pre, (tok_dir, n, id_to_token) in vocab_fixtures.items():
    d = os.path.join(work, "vocab-" + pre)
    cfg = kimi_linear_config()
    cfg.update(vocab_size=n, hidden_size=32, intermediate_size=64, moe_intermediate_size=16)
    json.dump(cfg, open(os.path.join(work, "vocab.json"), "w"))
    run("init", "--config", os.path.join(work, "vocab.json"), "--out", d)
    shutil.copytree(tok_dir, os.path.join(d, "tokenizer"))
    out = os.path.join(work, f"vocab-{pre}.gguf")
    run("export", "gguf", "--model", d, "--out", out)
    r = gguf.GGUFReader(out)
    check(field(r, gguf.Keys.Tokenizer.MODEL) == "gpt2" and field(r, gguf.Keys.Tokenizer.PRE) == pre,
          f"{pre}: tokenizer.ggml.model gpt2, pre {field(r, gguf.Keys.Tokenizer.PRE)}")
    tokens, types = field(r, gguf.Keys.Tokenizer.LIST), field(r, gguf.Keys.Tokenizer.TOKEN_TYPE)
    merges = field(r, gguf.Keys.Tokenizer.MERGES)
    check(len(tokens) == len(types) == n, f"{pre}: {n} tokens and types")
    if id_to_token:  # Hugging Face: the vocabulary's own strings (ByteLevel), added tokens by content
        wrong = [i for i in range(n) if tokens[i] != id_to_token(i)]
    else:  # tiktoken: each rank's bytes as ByteLevel characters, the specials by name
        specials = {i: s for s, i in kimi_enc._special_tokens.items()}
        wrong = [i for i in range(n) if tokens[i] != (specials[i] if i in specials
                                                      else byte_level(kimi_enc.decode_single_token_bytes(i)))]
        control = [i for i in range(n) if (types[i] == gguf.TokenType.CONTROL) != (i in specials)]
        check(not control, f"{pre}: the {len(specials)} specials and only they are CONTROL {control[:3]}")
    check(not wrong, f"{pre}: every token's string is the reference's {wrong[:3]}")
    index = {t: i for i, t in enumerate(tokens)}
    pairs = [m.split(" ") for m in merges]
    bad = [m for m, (a, b) in zip(merges, pairs) if a not in index or b not in index or a + b not in index or
           index[a + b] <= max(index[a], index[b]) and not id_to_token]
    check(merges and not bad, f"{pre}: {len(merges)} merges, each of two tokens into a token {bad[:3]}")
    ranks = {(a, b): k for k, (a, b) in enumerate(pairs)}
    made = {a + b for a, b in pairs}
    unbuilt = [t for t in made if textbook_bpe(t, ranks) != [t]]
    check(not unbuilt, f"{pre}: BPE over the file's merges rebuilds each of the {len(made)} merged tokens "
                       f"{unbuilt[:3]}")
    if not id_to_token:  # every multi-byte rank that tiktoken's BPE reaches has its merge
        reachable = [i for i in range(kimi_enc.n_vocab - 256) if len(kimi_enc.decode_single_token_bytes(i)) > 1 and
                     kimi_enc._encode_single_piece(kimi_enc.decode_single_token_bytes(i)) == [i]]
        missing = [i for i in reachable if tokens[i] not in made]
        check(not missing, f"{pre}: the {len(reachable)} multi-byte tokens tiktoken's BPE builds all have a merge "
                           f"{missing[:3]}")

d = os.path.join(work, "vocab-gpt2")
fx.build_gpt2(os.path.join(work, "tok-gpt2"), lines)
cfg = kimi_linear_config()
cfg.update(vocab_size=2500, hidden_size=32, intermediate_size=64, moe_intermediate_size=16)
json.dump(cfg, open(os.path.join(work, "vocab.json"), "w"))
run("init", "--config", os.path.join(work, "vocab.json"), "--out", d)
shutil.copytree(os.path.join(work, "tok-gpt2"), os.path.join(d, "tokenizer"))
p = run("export", "gguf", "--model", d, "--out", os.path.join(work, "gpt2.gguf"), ok=False)
check(p.returncode != 0 and "bytelevel prefix regex" in p.stderr and not os.path.exists(os.path.join(work, "gpt2.gguf")),
      f"a pre-tokenizer llama.cpp has no name for is refused naming its steps: {p.stderr.strip()[:120]}")

check.finish("gguf export")
