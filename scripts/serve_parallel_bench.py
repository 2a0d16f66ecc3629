#!/usr/bin/env python3
"""Data- and sequence-parallel serving against one process on the same cores (a benchmark, not a test).

    python3 scripts/serve_parallel_bench.py build/release/myriad [--config configs/small.json] [--cores 2]

One process gets every core (MYRIAD_THREADS=cores); `mpirun -np 2 ... --dp 2` / `--sp 2` get half each, so the
three are timed on the same hardware, alternately, with fresh random prompts (no prefix-cache hits):
  - sequence-parallel prefill: time to first token of a long prompt (max_tokens 1), one process vs --sp 2;
  - data-parallel decode: tokens/s of 4 concurrent clients (64-token prompts, 128 tokens each), one process vs
    --dp 2.
The ratio is the figure: on one machine the two layouts share the same cores, so ~1 is the ceiling here; across
machines each rank brings its own. The model has random weights (speed does not depend on them).
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(cmd, threads):
    env = dict(os.environ, MYRIAD_THREADS=str(threads))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    port = None
    for line in p.stdout:
        m = re.match(r"myriad serve: listening on http://127.0.0.1:(\d+)", line)  # rank 0's, not a replica's
        if m and port is None:
            port = int(m.group(1))
        if line.startswith("myriad serve: ready"):
            return p, port
    raise SystemExit("server did not start: " + " ".join(cmd))


def complete(port, prompt, max_tokens):
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=3600).read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("myriad")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/small.json"))
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-tokens", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="serve-parallel-")
    try:
        model = os.path.join(work, "m")
        subprocess.run([a.myriad, "init", "--config", a.config, "--out", model, "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        # A tokenizer (the server loads one), trained on this repository's docs; prompts are windows of their ids.
        docs = [os.path.join(ROOT, "README.md")] + [os.path.join(ROOT, "docs", f) for f in
                                                    sorted(os.listdir(os.path.join(ROOT, "docs")))]
        subprocess.run([a.myriad, "tokenizer", "train", "--data", *docs, "--vocab", "2048", "--out",
                        os.path.join(model, "tokenizer")], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        text = "".join(open(d).read() for d in docs)
        mpirun = ["bash", os.path.join(ROOT, "scripts/mpirun.sh"), "-np", "2"]
        layouts = {
            "one process": ([a.myriad, "serve", "--model", model, "--port", "0", "--served-model-name", "m"], a.cores),
            "--sp 2": (mpirun + [a.myriad, "serve", "--model", model, "--port", "0", "--served-model-name", "m",
                                 "--sp", "2", "--sp-min-tokens", "1024"], max(1, a.cores // 2)),
            "--dp 2": (mpirun + [a.myriad, "serve", "--model", model, "--port", "0", "--served-model-name", "m",
                                 "--dp", "2"], max(1, a.cores // 2)),
        }
        rng = random.Random(7)
        ids = []

        def window(n):  # n consecutive ids of the docs from a random place (no two prompts share a prefix)
            start = rng.randrange(0, len(ids) - n)
            return ids[start:start + n]
        ttft = {k: [] for k in ("one process", "--sp 2")}
        tps = {k: [] for k in ("one process", "--dp 2")}
        for _ in range(a.rounds):
            for name, (cmd, threads) in layouts.items():
                p, port = start(cmd, threads)
                try:
                    if not ids:
                        req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize",
                                                     data=json.dumps({"prompt": text}).encode(),
                                                     headers={"Content-Type": "application/json"})
                        try:
                            ids = json.loads(urllib.request.urlopen(req, timeout=600).read())["tokens"]
                        except urllib.error.HTTPError as e:
                            raise SystemExit(f"/tokenize: {e.code} {e.read().decode()[:500]}")
                        assert len(ids) > 2 * a.prompt_tokens, f"the docs give only {len(ids)} tokens"
                    if name in ttft:
                        prompt = window(a.prompt_tokens)
                        t0 = time.time()
                        complete(port, prompt, 1)
                        ttft[name].append(time.time() - t0)
                    if name in tps:
                        prompts = [window(64) for _ in range(4)]
                        t0 = time.time()
                        with cf.ThreadPoolExecutor(4) as ex:
                            outs = list(ex.map(lambda q: complete(port, q, 128), prompts))
                        tokens = sum(o["usage"]["completion_tokens"] for o in outs)
                        tps[name].append(tokens / (time.time() - t0))
                finally:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
        med = lambda xs: sorted(xs)[len(xs) // 2]
        print(f"model {a.config} (random weights), {a.cores} cores; one process {a.cores} threads, 2 ranks "
              f"{max(1, a.cores // 2)} each; medians of {a.rounds} alternating rounds")
        one, sp = med(ttft["one process"]), med(ttft["--sp 2"])
        print(f"time to first token, {a.prompt_tokens}-token prompt: one process {one:.2f} s, --sp 2 {sp:.2f} s "
              f"(speedup {one / sp:.2f}x)")
        one, dp = med(tps["one process"]), med(tps["--dp 2"])
        print(f"decode, 4 clients x 128 tokens: one process {one:.0f} tok/s, --dp 2 {dp:.0f} tok/s "
              f"(ratio {dp / one:.2f}x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
