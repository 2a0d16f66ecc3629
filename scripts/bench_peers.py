#!/usr/bin/env python3
"""myriad beside its peers on this machine (an optional benchmark, not a test; `make bench-peers`).

    build/pyenv/bin/python scripts/bench_peers.py [--threads 2] [--seconds 3] [--rounds 2] [--json FILE]
        [--parts training,serving] [--seq 1024] [--myriad build/release/myriad] [--work build/bench-peers]

Same machine, same shapes, same thread count for every side; the two sides of a comparison run as interleaved
rounds (myriad, peer, myriad, peer, ...) and the best of each is kept, so that a neighbour's load on this shared
machine reaches both alike. The figures are RATIOS, printed beside the machine's own ceilings as `myriad bench ops`
measures them (f32 FMA peak, sgemm, STREAM triad).

1. training vs PyTorch: one training step (forward + backward of the loss on one sequence of --seq tokens, random
   init, random targets) of the same model: myriad's from `myriad bench model` (its "forward + backward" row: best of
   repeats after a warm-up), PyTorch's from the float32 run of tests/reference/kimi_ref.py (the independent
   reference myriad's parity tests use: plain eager PyTorch written for clarity, not speed; its KDA chunk form and
   per-expert loop make a configs/small.json step take ~15 s on 2 cores, more under load, so a torch round is a
   warm-up and at least one step, whatever --seconds), for configs/small.json (KDA + MLA) and
   configs/deepseek2-small.json (every layer MLA with RoPE). GFLOP/s of both use the FLOPs per token `myriad bench
   model` reports.
2. serving vs llama.cpp (only when `import llama_cpp` works; `make interop-llama` builds it): a random
   configs/small.json model (`myriad init`, a tokenizer trained on this repository's text), exported by `myriad
   export gguf` as f32, q8_0 and q4_0; prefill of a 512-token prompt and batch-1 decode, llama.cpp through
   llama-cpp-python against `myriad bench serve` on the same model (f32 vs f32, q8 vs q8_0, q4 vs q4_0).

`--seconds S` is the timed budget of each piece (each side of each round); `myriad bench model` and `myriad bench
serve` also run their other sections (KDA forms, MoE scaling, long context, prefix reuse: about 30 s and 15 s on
2 cores), which cannot be left out without changing them.
"""

import argparse
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_CONFIGS = ["configs/small.json", "configs/deepseek2-small.json"]
SERVE_CONFIG = "configs/small.json"
# llama.cpp's GGUF type for each of myriad's weight formats.
FORMATS = [("f32", "f32"), ("q8", "q8_0"), ("q4", "q4_0")]
# The shapes `myriad bench serve` times (src/bench/serve_bench.h, serve_bench.cc): prefill of a 512-token prompt;
# decode at batch 1 after a 64-token prompt. llama.cpp is timed on the same shapes.
PREFILL_TOKENS, DECODE_PROMPT_TOKENS, DECODE_TOKENS = 512, 64, 128


# ------------------------------------------------------------------------------------------------ helpers


def fmt_ms(s):
    return f"{s * 1e3:10.1f}"


def best(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


class Myriad:
    """The CLI, always with --threads (its default takes the cores free at start-up, which on a shared machine
    may be fewer than the peer gets)."""

    def __init__(self, binary, threads):
        self.binary, self.threads = binary, threads

    def run(self, *args):
        cmd = [self.binary, *args, "--threads", str(self.threads)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"bench_peers: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr or p.stdout}")
        return p.stdout

    def bench_json(self, work, name, *args):
        """Runs `myriad bench ... --json F` and returns F's contents."""
        out = os.path.join(work, name + ".json")
        self.run("bench", *args, "--json", out)
        with open(out) as f:
            return json.load(f)


# ------------------------------------------------------------------------------------------------ machine


def machine_ceilings(m, work):
    """`myriad bench ops --seconds 3`: the ceilings it measures (its `limits`), printed and returned."""
    j = m.bench_json(work, "ops", "ops", "--seconds", "3")
    lim = j["limits"]
    c = {"fma_peak_gflops": lim["fma_peak"]["gflops"], "fma_isa": lim["fma_peak"]["isa"],
         "int8_peak_gops": lim["int8_peak"]["gops"], "sgemm_gflops": lim["sgemm"]["gflops"],
         "sgemm_n": lim["sgemm"]["n"], "triad_gbs": lim["triad"]["gbs"], "read_gbs": lim["read"]["gbs"],
         "cpu": lim["cpu"], "threads": lim["threads"]}
    print(f"machine ({c['threads']} threads; `myriad bench ops --seconds 3`):")
    print(f"  cpu      {c['cpu']}")
    print(f"  fma      {c['fma_peak_gflops']:7.1f} GFLOP/s  f32 FMA peak ({c['fma_isa']})")
    share = 100 * c["sgemm_gflops"] / c["fma_peak_gflops"]
    print(f"  sgemm    {c['sgemm_gflops']:7.1f} GFLOP/s  {c['sgemm_n']}^3, {share:.0f}% of the FMA peak")
    print(f"  int8     {c['int8_peak_gops']:7.1f} GOP/s")
    print(f"  triad    {c['triad_gbs']:7.1f} GB/s     read {c['read_gbs']:.1f} GB/s")
    return c


def myriad_version(m):
    lines = [l.rstrip() for l in m.run("version").splitlines() if l.strip()]
    print("myriad (`myriad version`):")
    for l in lines:
        print("  " + l.strip())
    return lines


# ------------------------------------------------------------------------------------------------ 1. training


def torch_worker(a):
    """One PyTorch round in its own process (so that the BLAS thread count is set before torch loads it, and its
    memory is gone while myriad runs): prints one JSON line."""
    import torch

    torch.set_num_threads(a.threads)
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import kimi_ref

    cfg = kimi_ref.load_config(os.path.join(ROOT, a.config))
    t0 = time.perf_counter()
    W = kimi_ref.prepare(kimi_ref.init_weights(cfg, seed=0), torch.float32)  # parameters: leaves requiring grad
    params = [W[n] for n in W if kimi_ref.is_param(n)]
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, cfg.vocab_size, (a.seq,), generator=g)
    targets = torch.randint(0, cfg.vocab_size, (a.seq,), generator=g)
    init_s = time.perf_counter() - t0

    def step():
        for p in params:
            p.grad = None  # zero_grad(set_to_none=True), as a training loop does
        logits = kimi_ref.forward(cfg, W, tokens, kda_impl=a.torch_kda, kda_chunk=64, mla_impl="naive")
        loss = kimi_ref.cross_entropy(logits, targets)
        loss.backward()
        return float(loss)

    t0 = time.perf_counter()
    loss = step()  # warm-up: allocator, OpenMP and BLAS thread pools
    warmup_s = time.perf_counter() - t0
    # At least one timed step: the reference takes ~15 s per step at T = 1024 on 2 cores (see the docstring), and
    # the rounds give the best-of anyway.
    times, start = [], time.perf_counter()
    while not times or time.perf_counter() - start < a.seconds:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)

    # Which BLAS torch calls: Debian's torch is built against the generic libblas (BLAS_INFO=generic), whichever
    # library the alternatives system points at; the mapped libraries say which one it is.
    libs = sorted({l.split()[-1] for l in open("/proc/self/maps")
                   if re.search(r"blas|lapack|mkl|dnnl|gomp|iomp", l.split()[-1] if l.split() else "")})
    openblas = None
    for lib in libs:
        if "openblas" in os.path.basename(lib):
            try:
                import ctypes
                ob = ctypes.CDLL(lib)
                ob.openblas_get_config.restype = ctypes.c_char_p
                ob.openblas_get_num_threads.restype = ctypes.c_int
                openblas = f"{ob.openblas_get_config().decode()}, {ob.openblas_get_num_threads()} threads"
            except (OSError, AttributeError):
                pass
    show = torch.__config__.show()
    excerpt = [l.strip() for l in show.splitlines() if l.strip().startswith("- ") and "Build settings" not in l]
    settings = re.findall(r"\b(BLAS_INFO|LAPACK_INFO|USE_MKLDNN|USE_OPENMP)=([^,\s]+)", show)
    excerpt.append("- " + ", ".join(f"{k}={v}" for k, v in settings))
    print(json.dumps({"best_s": min(times), "times_s": times, "warmup_s": warmup_s, "init_s": init_s, "loss": loss,
                      "torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
                      "config_excerpt": excerpt, "blas_libraries": libs, "openblas": openblas}))


def torch_round(a, config):
    env = dict(os.environ)
    # OpenBLAS (pthreads) and OpenMP read these when torch loads them; torch.set_num_threads covers only its own
    # OpenMP pool.
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(a.threads)
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--config", config, "--seq", str(a.seq),
           "--threads", str(a.threads), "--seconds", str(a.seconds), "--torch-kda", a.torch_kda]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"bench_peers: the PyTorch run of {config} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def myriad_train_round(m, a, config, work):
    j = m.bench_json(work, "model-" + os.path.basename(config).replace(".json", ""), "model", "--config", config,
                     "--seq", str(a.seq), "--seconds", str(a.seconds))
    row = next(r for r in j["model"]["rows"] if r["row"] == "forward + backward")
    return {"best_s": row["timing"]["best_s"], "reps": row["timing"]["reps"],
            "flops_per_token": j["model"]["flops_per_token_forward_backward"],
            "active_params": j["model"]["active_params"], "fma_peak_gflops_own_run": j["limits"]["fma_peak"]["gflops"]}


def training_part(m, a, ceil, work):
    peak = ceil["fma_peak_gflops"]
    print(f"\n1. training step vs PyTorch: forward + backward of the loss on one sequence of {a.seq} tokens, random "
          f"init and targets; {a.threads} threads; {a.rounds} interleaved rounds (myriad, torch, ...), best of each")
    print(f"   myriad: `myriad bench model --seq {a.seq} --seconds {a.seconds}`, its forward + backward row (best "
          "of >= 2 after a warm-up)")
    print(f"   torch:  tests/reference/kimi_ref.py in float32 (KDA {a.torch_kda} form, chunk 64, MLA naive), best "
          f"of >= 1 per round after a warm-up, ~{a.seconds:g} s of repeats per round. It is the parity oracle, "
          "written\n           for clarity (a Python loop over the experts, KDA's chunks and their decays as "
          "elementwise einsums), not a tuned\n           PyTorch model: the ratio is myriad against plain eager "
          "PyTorch code of the same maths")
    results, torch_info = [], None
    for config in TRAIN_CONFIGS:
        mine, theirs = [], []
        for r in range(a.rounds):
            mine.append(myriad_train_round(m, a, config, work))
            theirs.append(torch_round(a, config))
            print(f"   {config} round {r + 1}: myriad {mine[-1]['best_s'] * 1e3:.1f} ms, torch "
                  f"{theirs[-1]['best_s'] * 1e3:.1f} ms", flush=True)
        torch_info = torch_info or theirs[0]
        fpt = mine[0]["flops_per_token"]
        t_m, t_t = best(x["best_s"] for x in mine), best(x["best_s"] for x in theirs)

        def gf(t):
            return fpt * a.seq / t * 1e-9

        results.append({"config": config, "seq": a.seq, "flops_per_token": fpt,
                        "active_params": mine[0]["active_params"],
                        "myriad": {"best_s": t_m, "gflops": gf(t_m), "fma_peak_fraction": gf(t_m) / peak,
                                   "rounds_s": [x["best_s"] for x in mine],
                                   "fma_peak_gflops_own_runs": [x["fma_peak_gflops_own_run"] for x in mine]},
                        "torch": {"best_s": t_t, "gflops": gf(t_t), "fma_peak_fraction": gf(t_t) / peak,
                                  "rounds_s": [x["best_s"] for x in theirs], "warmup_s": theirs[0]["warmup_s"],
                                  "loss": theirs[0]["loss"]},
                        "ratio_torch_over_myriad": t_t / t_m})

    print(f"\n   {'config':30s} {'FLOP/token':>10s} {'myriad ms':>10s} {'torch ms':>10s} {'torch/myriad':>13s}"
          f"  {'GFLOP/s (% FMA peak): myriad':>29s} {'torch':>13s}")
    for r in results:
        print(f"   {r['config']:30s} {r['flops_per_token']:10.3g} {fmt_ms(r['myriad']['best_s'])} "
              f"{fmt_ms(r['torch']['best_s'])} {r['ratio_torch_over_myriad']:12.2f}x "
              f"{r['myriad']['gflops']:22.1f} ({100 * r['myriad']['fma_peak_fraction']:4.1f}%) "
              f"{r['torch']['gflops']:6.1f} ({100 * r['torch']['fma_peak_fraction']:4.1f}%)")
    print(f"   (torch/myriad > 1: myriad faster; % of the f32 FMA peak {peak:.1f} GFLOP/s, sgemm "
          f"{ceil['sgemm_gflops']:.1f} = {100 * ceil['sgemm_gflops'] / peak:.0f}% of it; FLOPs per token as `myriad "
          "bench model` counts them: 6 x activated params + attention)")
    # The ceiling drifts on a shared machine; `myriad bench model` measures it again at each start.
    own = [p for r in results for p in r["myriad"]["fma_peak_gflops_own_runs"]]
    if max(own) > 1.2 * peak or min(own) < peak / 1.2:
        print(f"   note: the FMA peak drifted: `myriad bench model` measured {min(own):.0f}-{max(own):.0f} GFLOP/s at "
              f"its starts (bench ops: {peak:.0f}); the % columns use bench ops'")
    print(f"\n   torch {torch_info['torch_version']}, {torch_info['torch_threads']} threads "
          "(torch.__config__.show(), excerpt):")
    for l in torch_info["config_excerpt"]:
        print("     " + l)
    libs = ", ".join(torch_info["blas_libraries"]) or "none"
    print("   BLAS, OpenMP and oneDNN libraries mapped into the torch process: " + libs)
    if torch_info["openblas"]:
        print("   OpenBLAS: " + torch_info["openblas"])
    return {"rows": results, "torch": {k: torch_info[k] for k in ("torch_version", "torch_threads", "config_excerpt",
                                                                  "blas_libraries", "openblas")}}


# ------------------------------------------------------------------------------------------------ 2. serving


def repo_text(path):
    """This repository's own text (docs and sources) in one file: enough distinct words for a 16384-token BPE."""
    files = [os.path.join(ROOT, "README.md")]
    for pattern in ("docs/**/*.md", "src/**/*.h", "src/**/*.cc", "tools/**/*.cc"):
        files += sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True))
    with open(path, "w", encoding="utf-8") as out:
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as src:
                out.write(src.read())


def make_model(m, config, text, d, seed=0):
    """`myriad init` of a config with a trained myriad tokenizer (as tests/interop/gguf_llama_cpp.py makes its
    models): DIR/model with DIR/model/tokenizer. The tokenizer's vocabulary must fill vocab_size (GGUF export
    of a SentencePiece vocabulary requires it)."""
    with open(config) as f:
        vocab = json.load(f)["vocab_size"]
    m.run("tokenizer", "train", "--data", text, "--vocab", str(vocab), "--out", os.path.join(d, "tok"))
    m.run("init", "--config", config, "--out", os.path.join(d, "model"), "--seed", str(seed), "--force")
    shutil.copytree(os.path.join(d, "tok"), os.path.join(d, "model", "tokenizer"), dirs_exist_ok=True)
    return os.path.join(d, "model")


def export_gguf(m, model, out, qtype):
    m.run("export", "gguf", "--model", model, "--out", out, "--type", qtype)
    import gguf
    f = gguf.GGUFReader(out).fields.get("general.architecture")
    return None if f is None else f.contents()


def kimi_linear_config(tiny):
    """configs/tiny.json as Kimi-Linear's shape (as tests/interop/gguf_llama_cpp.py's kimi_linear()): what the
    kimi-linear GGUF arch carries (SiLU, no AttnRes, no output gate or q_lora, no latent MoE)."""
    c = json.loads(json.dumps(tiny))
    c.update(hidden_act="silu", attn_res_mode="none", mla_use_output_gate=False, q_lora_rank=None)
    for k in ("attn_res_block_size", "routed_expert_hidden_size", "latent_moe_use_norm"):
        c.pop(k, None)
    c["linear_attn_config"].pop("gate_lower_bound", None)
    c["linear_attn_config"]["use_full_rank_gate"] = False
    return c


def probe_load(llama_cpp, path, threads):
    """Whether llama.cpp loads a GGUF file: (ok, reason). Its log goes to stderr, which is captured (verbose, so
    that an unknown architecture is named)."""
    with tempfile.TemporaryFile() as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=threads, verbose=True)
            del llm
            ok, err = True, ""
        except Exception as e:  # noqa: BLE001 - the refusal is the answer
            ok, err = False, str(e)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    why = [l.strip() for l in text.splitlines() if "unknown model architecture" in l or "error loading model" in l]
    return ok, "; ".join(why[:2]) or err


def llama_round(llama_cpp, path, a, vocab):
    """Prefill and batch-1 decode of one GGUF file: best of repeats within --seconds (at least 2 of each)."""
    rng = random.Random(1)
    prompt = [rng.randrange(3, vocab) for _ in range(PREFILL_TOKENS)]
    short = [rng.randrange(3, vocab) for _ in range(DECODE_PROMPT_TOKENS)]
    steps = [rng.randrange(3, vocab) for _ in range(DECODE_TOKENS)]
    # f32 KV cache (type 0 = GGML_TYPE_F32, not the default f16), as myriad's default latent cache is f32; one
    # batch of the whole prompt (n_batch = n_ubatch = 512), as myriad prefills it in one call.
    llm = llama_cpp.Llama(model_path=path, n_ctx=PREFILL_TOKENS + DECODE_TOKENS + 64, n_batch=PREFILL_TOKENS,
                          n_ubatch=PREFILL_TOKENS, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                          type_k=0, type_v=0)
    llm.reset()
    llm.eval(prompt)  # warm-up
    budget = a.seconds / 2
    prefill, start = [], time.perf_counter()
    while len(prefill) < 2 or time.perf_counter() - start < budget:
        llm.reset()  # eval() then drops the cache (and the recurrent states) from position 0
        t0 = time.perf_counter()
        llm.eval(prompt)
        prefill.append(time.perf_counter() - t0)
    # Decode: the given tokens one at a time (the model's step; no sampler, as myriad's bench feeds a fixed token).
    decode, start = [], time.perf_counter()
    while len(decode) < 2 or time.perf_counter() - start < budget:
        llm.reset()
        llm.eval(short)
        t0 = time.perf_counter()
        for t in steps:
            llm.eval([t])
        decode.append((time.perf_counter() - t0) / DECODE_TOKENS)
    del llm
    return {"prefill_tokens_s": PREFILL_TOKENS / min(prefill), "decode_tokens_s_b1": 1.0 / min(decode)}


def serving_part(m, a, ceil, work):
    try:
        import llama_cpp
    except ImportError:
        print("\n2. serving vs llama.cpp: llama_cpp not installed: `make interop-llama` builds it (about 10 minutes); "
              "skipped")
        return {"skipped": "llama_cpp not installed"}

    d = os.path.join(work, "serve")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    text = os.path.join(d, "text.txt")
    repo_text(text)
    print(f"\n2. serving vs llama.cpp: llama-cpp-python {llama_cpp.__version__}; random {SERVE_CONFIG} model "
          f"(`myriad init`), {a.threads} threads, {a.rounds} interleaved rounds, best of each")
    sysinfo = getattr(llama_cpp, "llama_print_system_info", None)
    info = sysinfo().decode("utf-8", "replace").strip() if sysinfo else "?"
    print(f"   llama.cpp system info: {info}")
    model = make_model(m, os.path.join(ROOT, SERVE_CONFIG), text, d)
    files, arch = {}, None
    for mine, qtype in FORMATS:
        files[mine] = os.path.join(d, f"small-{qtype}.gguf")
        arch = export_gguf(m, model, files[mine], qtype)
    print(f"   `myriad export gguf` writes {SERVE_CONFIG} as arch {arch} (f32, q8_0, q4_0)")

    # Which of myriad's GGUF architectures this llama.cpp knows: the kimi-k3 file above, and a tiny Kimi-Linear.
    with open(os.path.join(ROOT, "configs", "tiny.json")) as f:
        kl_cfg = kimi_linear_config(json.load(f))
    kl_dir = os.path.join(d, "kimi-linear")
    os.makedirs(kl_dir)
    with open(os.path.join(kl_dir, "config.json"), "w") as f:
        json.dump(kl_cfg, f)
    kl_file = os.path.join(kl_dir, "tiny.gguf")
    kl_arch = export_gguf(m, make_model(m, os.path.join(kl_dir, "config.json"), text, kl_dir), kl_file, "f32")
    known = {}
    for name, path in ((kl_arch, kl_file), (arch, files["f32"])):
        ok, why = probe_load(llama_cpp, path, a.threads)
        known[name] = {"loads": ok, "reason": why}
        print(f"   llama.cpp knows {name}: {'yes (loads the file)' if ok else 'no: ' + why}")
    if not known[arch]["loads"]:
        print(f"   the {arch} files do not load in this llama.cpp: timings skipped")
        return {"llama_cpp_version": llama_cpp.__version__, "arch": arch, "known_archs": known,
                "skipped": f"llama.cpp does not load {arch}"}

    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    mine_rounds, theirs_rounds = [], {q: [] for _, q in FORMATS}
    for r in range(a.rounds):
        j = m.bench_json(work, "serve", "serve", "--model", model, "--formats", ",".join(f for f, _ in FORMATS),
                         "--seconds", str(a.seconds))
        mine_rounds.append(j["formats"])
        for f, q in FORMATS:
            theirs_rounds[q].append(llama_round(llama_cpp, files[f], a, vocab))
        print(f"   round {r + 1}: " + ", ".join(
            f"{f} prefill {mine_rounds[-1][f]['prefill_tokens_s']:.0f} / {theirs_rounds[q][-1]['prefill_tokens_s']:.0f}"
            f" t/s, decode {mine_rounds[-1][f]['decode_tokens_s_b1']:.0f} / "
            f"{theirs_rounds[q][-1]['decode_tokens_s_b1']:.0f} t/s" for f, q in FORMATS) + " (myriad / llama.cpp)",
            flush=True)

    peak = ceil["fma_peak_gflops"]
    rows = []
    for f, q in FORMATS:
        mp = max(x[f]["prefill_tokens_s"] for x in mine_rounds)
        md = max(x[f]["decode_tokens_s_b1"] for x in mine_rounds)
        lp = max(x["prefill_tokens_s"] for x in theirs_rounds[q])
        ld = max(x["decode_tokens_s_b1"] for x in theirs_rounds[q])
        # Prefill FLOPs per token as `myriad bench serve` counts them (2 x activated params + attention), for both.
        fpt = mine_rounds[0][f]["prefill_gflops"] / mine_rounds[0][f]["prefill_tokens_s"] * 1e9
        # Batch-1 bandwidth against the triad `myriad bench serve` timed interleaved with it (its own ratio).
        best_round = max(mine_rounds, key=lambda x: x[f]["b1_bandwidth_gbs"])[f]
        rows.append({"myriad_format": f, "gguf_type": q, "prefill_flops_per_token": fpt,
                     "myriad": {"prefill_tokens_s": mp, "decode_tokens_s_b1": md,
                                "b1_bandwidth_gbs": best_round["b1_bandwidth_gbs"],
                                "b1_triad_gbs": best_round["triad_gbs"],
                                "b1_bytes_per_token": best_round["b1_bytes_per_token"]},
                     "llama_cpp": {"prefill_tokens_s": lp, "decode_tokens_s_b1": ld},
                     "ratio_prefill_myriad_over_llama": mp / lp, "ratio_decode_myriad_over_llama": md / ld})
    print(f"\n   prefill: {PREFILL_TOKENS}-token prompt; decode: batch 1 after a {DECODE_PROMPT_TOKENS}-token prompt "
          f"(llama.cpp: {DECODE_TOKENS} consecutive steps; myriad: its bench's 4-step calls)")
    print(f"   {'format':14s} {'prefill t/s myriad':>19s} {'llama.cpp':>10s} {'ratio':>7s}   {'decode t/s myriad':>18s}"
          f" {'llama.cpp':>10s} {'ratio':>7s}")
    for r in rows:
        gm = r["prefill_flops_per_token"] * r["myriad"]["prefill_tokens_s"] * 1e-9
        gl = r["prefill_flops_per_token"] * r["llama_cpp"]["prefill_tokens_s"] * 1e-9
        print(f"   {r['myriad_format'] + ' / ' + r['gguf_type']:14s} {r['myriad']['prefill_tokens_s']:19.0f} "
              f"{r['llama_cpp']['prefill_tokens_s']:10.0f} {r['ratio_prefill_myriad_over_llama']:6.2f}x   "
              f"{r['myriad']['decode_tokens_s_b1']:18.1f} {r['llama_cpp']['decode_tokens_s_b1']:10.1f} "
              f"{r['ratio_decode_myriad_over_llama']:6.2f}x")
        print(f"   {'':14s} prefill GFLOP/s {gm:.1f} ({100 * gm / peak:.1f}% FMA peak) vs {gl:.1f} "
              f"({100 * gl / peak:.1f}%); myriad decode reads {r['myriad']['b1_bandwidth_gbs']:.1f} GB/s (weights + "
              f"cache) = {100 * r['myriad']['b1_bandwidth_gbs'] / r['myriad']['b1_triad_gbs']:.0f}% of its "
              f"interleaved triad, {r['myriad']['b1_triad_gbs']:.1f} GB/s")
    print("   (ratio = myriad / llama.cpp tokens/s: > 1, myriad faster)")
    return {"llama_cpp_version": llama_cpp.__version__, "llama_cpp_system_info": info, "arch": arch,
            "known_archs": known, "prefill_tokens": PREFILL_TOKENS, "decode_prompt_tokens": DECODE_PROMPT_TOKENS,
            "decode_tokens": DECODE_TOKENS, "rows": rows}


# ------------------------------------------------------------------------------------------------ main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--myriad", default=os.path.join(ROOT, "build", "release", "myriad"))
    ap.add_argument("--threads", type=int, default=2, help="threads of every side (default 2)")
    ap.add_argument("--seconds", type=int, default=3, help="timed budget of each piece, whole seconds as `myriad "
                    "bench` takes them (default 3)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per comparison (default 2)")
    ap.add_argument("--seq", type=int, default=1024, help="training: tokens in the sequence (default 1024)")
    ap.add_argument("--parts", default="training,serving", help="of training,serving (default both)")
    ap.add_argument("--torch-kda", choices=["chunk", "recurrent"], default="chunk",
                    help="KDA form of the PyTorch reference (default chunk: the faster of its two in training)")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench-peers"), help="scratch directory")
    ap.add_argument("--json", default=None, help="also write the results as JSON")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)
    parts = {p.strip() for p in a.parts.split(",") if p.strip()}
    if not parts <= {"training", "serving"} or a.threads < 1 or a.rounds < 1 or a.seconds < 1:
        ap.error("--parts takes training and/or serving; --threads, --rounds and --seconds must be positive")
    if not os.access(a.myriad, os.X_OK):
        sys.exit(f"bench_peers: {a.myriad} is not built (make build)")
    os.makedirs(a.work, exist_ok=True)
    os.chdir(ROOT)  # configs are given relative to the repository

    m = Myriad(a.myriad, a.threads)
    print(f"bench_peers: {a.threads} threads, ~{a.seconds:g} s per timed piece, {a.rounds} rounds\n")
    out = {"threads": a.threads, "seconds": a.seconds, "rounds": a.rounds, "myriad_version": myriad_version(m),
           "machine": machine_ceilings(m, a.work)}
    if "training" in parts:
        out["training"] = training_part(m, a, out["machine"], a.work)
    if "serving" in parts:
        out["serving"] = serving_part(m, a, out["machine"], a.work)
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        os.replace(tmp, a.json)
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
