#!/usr/bin/env python3
"""Optional: a GGUF file written by `myriad export gguf`, run by llama.cpp itself (llama-cpp-python), against
myriad's own logits on the same tokens.

usage: gguf_llama_cpp.py MYRIAD_BINARY REPO_ROOT WORK_DIR      (needs `import llama_cpp`; exits 0 with a note when
                                                               it is missing: `make interop-llama` builds it)

llama-cpp-python compiles llama.cpp from source (about 10 minutes on 2 cores), too long for `make test`; the
version it vendors has llama.cpp's kimi-linear, kimi-k3 and deepseek2 architectures. For each arch: a random model
in the shape the format carries (`myriad init`, a trained myriad tokenizer; for kimi-k3 configs/tiny.json itself
and a variant with the other choices: softplus gate, no AttnRes, top-1 routing, no latent norm, an unclamped SiTU
up branch, tied embeddings, q_proj), exported as f32 and q8_0; llama.cpp's logits
(f32 KV cache) for every position of the prompt against `myriad logits` (the training forward). Tolerances: f32
files: max error within 1e-5 of the logits' scale (two f32 implementations with different op orders and chunking:
measured 2.7e-6 kimi-linear, 1.8e-6 / 1.9e-6 kimi-k3 and its variant, 3.9e-7 deepseek2; a wrong tensor layout, RoPE
pairing, gate or routing is off by O(1e-2) or more). q8_0 files are a smoke check only (their bytes are checked
exactly by gguf_export_check.py), against the f32 logits: relative RMS error within 1e-1 and 80% argmax agreement
(weights and, in ggml's q8_0 dot products, activations are rounded to 8 bits, and a random tiny model has
near-ties; measured 1.4e-2 to 5.3e-2 and 83-100%; a misplaced block gives O(1)).
"""

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_checks import Checks, myriad_runner, randomize_constant_inits  # noqa: E402

try:
    import llama_cpp
except ImportError:
    print("llama_cpp is not installed (make interop-llama builds it); skipped")
    sys.exit(0)

from safetensors.numpy import load_file  # noqa: E402

myriad, root, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
check = Checks()
run = myriad_runner(myriad)

tiny = json.load(open(os.path.join(root, "configs", "tiny.json")))


def kimi_linear():
    c = json.loads(json.dumps(tiny))
    # rms_norm_eps 1e-6: llama.cpp normalizes the MLA latents (q_a / kv_a layernorms) with rms_norm_eps, where the
    # modeling code (and myriad) use 1e-6; with tiny.json's 1e-5 its logits differ by ~7e-4 of their scale for
    # that reason alone (measured), which would hide a real difference below it.
    c.update(hidden_act="silu", attn_res_mode="none", mla_use_output_gate=False, q_lora_rank=None, rms_norm_eps=1e-6)
    for k in ("attn_res_block_size", "routed_expert_hidden_size", "latent_moe_use_norm"):
        c.pop(k)
    c["linear_attn_config"].pop("gate_lower_bound")
    c["linear_attn_config"]["use_full_rank_gate"] = False
    return c


def kimi_k3():
    c = json.loads(json.dumps(tiny))
    c.update(rms_norm_eps=1e-6)  # as above
    return c


def kimi_k3_variant():
    c = kimi_k3()
    c["linear_attn_config"].pop("gate_lower_bound")
    c.update(latent_moe_use_norm=False, activation_situ_linear_beta=None, num_experts_per_token=1,
             attn_res_mode="none", tie_word_embeddings=True, q_lora_rank=None)
    c.pop("attn_res_block_size")
    return c


def deepseek2():
    c = kimi_linear()
    c.pop("linear_attn_config")
    c.update(mla_use_nope=False, rope_theta=10000.0, num_experts_per_token=3, q_lora_rank=32)
    return c


text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
open(os.path.join(work, "text.txt"), "w").write(text)
run("tokenizer", "train", "--data", os.path.join(work, "text.txt"), "--vocab", "512", "--out", os.path.join(work, "tok"))
tokens = [int(x.split("\t")[0]) for x in run("tokenizer", "encode", "--tokenizer", os.path.join(work, "tok"),
                                             "--pieces", "--text", "The model reads the tensors of a folder")
          .stdout.splitlines() if "\t" in x][:24]

for arch, cfg in (("kimi-linear", kimi_linear()), ("kimi-k3", kimi_k3()), ("kimi-k3 variant", kimi_k3_variant()),
                  ("deepseek2", deepseek2())):
    d = os.path.join(work, arch.replace(" ", "-"))
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    run("init", "--config", os.path.join(d, "config.json"), "--out", os.path.join(d, "model"), "--seed", "3")
    randomize_constant_inits(os.path.join(d, "model", "model.safetensors"), 7)
    shutil.copytree(os.path.join(work, "tok"), os.path.join(d, "model", "tokenizer"))
    out = os.path.join(d, "logits.safetensors")
    run("logits", "--model", os.path.join(d, "model"), "--tokens", ",".join(map(str, tokens)), "--out", out)
    mine = load_file(out)["logits"].astype(np.float64)
    for qtype, tol, min_agree in (("f32", 1e-5, 1.0), ("q8_0", 1e-1, 0.8)):
        f = os.path.join(d, f"model-{qtype}.gguf")
        run("export", "gguf", "--model", os.path.join(d, "model"), "--out", f, "--type", qtype)
        try:
            llm = llama_cpp.Llama(model_path=f, n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_threads=2,
                                  type_k=0, type_v=0)  # an f32 KV cache (GGML_TYPE_F32), not the default f16
        except Exception as e:  # noqa: BLE001 - report llama.cpp's refusal as the failure it is
            check(False, f"{arch} {qtype}: llama.cpp loads the file ({e})")
            continue
        check(True, f"{arch} {qtype}: llama.cpp loads the file")
        llm.eval(tokens)
        theirs = np.array(llm.scores[: len(tokens)], dtype=np.float64)
        err = float(np.max(np.abs(theirs - mine))) / float(np.max(np.abs(mine)))
        agree = float(np.mean(np.argmax(theirs, 1) == np.argmax(mine, 1)))
        rms = float(np.linalg.norm(theirs - mine) / np.linalg.norm(mine))
        measure, value = ("max error / max |logit|", err) if qtype == "f32" else ("relative rms error", rms)
        check(value <= tol and agree >= min_agree, f"{arch} {qtype}: llama.cpp's logits vs myriad's, {len(tokens)} "
              f"positions: {measure} {value:.1e} (bound {tol:g}), argmax agreement {agree:.0%}")
        del llm


# ---------------------------------------------------------------------------------------------- vocabularies
# The published tokenizer kinds exported as llama.cpp's "gpt2" vocabulary: each fixture written by PyPI's tokenizers
# or tiktoken (tests/interop/tokenizer_fixtures.py, as the tokenizer test builds them), a model with it exported,
# and llama.cpp's own tokenization of multilingual text (special tokens parsed) against the reference library's ids.
import tokenizer_fixtures as fx  # noqa: E402

lines = fx.training_lines(os.path.join(root, "..", "shared"))
texts = fx.MULTILINGUAL + ["Hello world!  It's 12345 apples, isn't it?\n\n\tdef f(x):\n        return x ** 2\n",
                           "UPPER lower MiXeD 3.14159 1,000,000 don't WE'LL \u00e9t\u00e9 \u2603\u2603"]
fixtures = {}
for name, build in (("llama3", fx.build_llama3), ("deepseek", fx.build_deepseek), ("qwen", fx.build_qwen)):
    d = os.path.join(work, "tok-" + name)
    ref = build(d, lines)
    fixtures[name] = (d, ref.get_vocab_size(with_added_tokens=True),
                      lambda t, ref=ref: ref.encode(t).ids)  # tokenizers parses added tokens by default
kimi_enc = fx.build_kimi(os.path.join(work, "tok-kimi"), fixtures["llama3"][0])
fixtures["kimi"] = (os.path.join(work, "tok-kimi"), kimi_enc.n_vocab,
                    lambda t: kimi_enc.encode(t, allowed_special="all"))
specials = {"llama3": "<|im_start|>x<|im_end|>", "deepseek": "<\uff5cbegin\u2581of\u2581sentence\uff5c>hi",
            "qwen": "<|im_start|>user\nhi<|im_end|>", "kimi": "<|im_user|>user<|im_middle|>hi<|im_end|>"}
for name, (tok_dir, vocab, reference) in fixtures.items():
    d = os.path.join(work, "vocab-" + name)
    os.makedirs(d)
    cfg = kimi_linear()
    cfg.update(vocab_size=vocab, hidden_size=32, intermediate_size=64, moe_intermediate_size=16)
    cfg.pop("pad_token_id")
    cfg.pop("bos_token_id")
    cfg.pop("eos_token_id")
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    run("init", "--config", os.path.join(d, "config.json"), "--out", os.path.join(d, "model"), "--seed", "1")
    shutil.copytree(tok_dir, os.path.join(d, "model", "tokenizer"))
    f = os.path.join(d, "model.gguf")
    out = run("export", "gguf", "--model", os.path.join(d, "model"), "--out", f).stdout.strip()
    llm = llama_cpp.Llama(model_path=f, vocab_only=True, verbose=False)
    bad = [t[:30] for t in texts + [specials[name]]
           if llm.tokenize(t.encode("utf-8"), add_bos=False, special=True) != reference(t)]
    if name != "kimi":
        check(not bad, f"{name} vocabulary ({vocab} ids) in llama.cpp: its tokenization of {len(texts) + 1} "
                       f"multilingual texts = the reference library's ids {bad[:3]}")
    else:
        # Kimi's pattern cuts some texts differently in different regex engines: tiktoken's (Rust's fancy-regex, and
        # myriad's PCRE2, which the tokenizer test holds to it) split a Devanagari vowel sign from a following comma,
        # Python's `regex` and llama.cpp's hand-written "kimi-k2" pre-tokenizer keep "\u093e," together. So the
        # exported merges are checked piece by piece (the pieces Python's regex cuts, each BPE-encoded by tiktoken
        # without a split, _encode_single_piece), and the whole texts are reported.
        import regex
        pieces = [p for t in texts for p in regex.findall(kimi_enc._pat_str, t)]
        bad_pieces = [p for p in pieces if llm.tokenize(p.encode("utf-8"), add_bos=False, special=False)
                      != kimi_enc._encode_single_piece(p.encode("utf-8"))]
        check(not bad_pieces, f"kimi vocabulary ({vocab} ids, merges derived from tiktoken's ranks) in llama.cpp: "
                              f"{len(pieces)} pieces of the texts tokenized to tiktoken's BPE ids {bad_pieces[:3]}")
        print(f"     whole texts: {len(texts) + 1 - len(bad)} of {len(texts) + 1} identical (llama.cpp's kimi-k2 "
              f"pre-tokenizer differs on {bad})")
    del llm

check.finish("gguf in llama.cpp")
