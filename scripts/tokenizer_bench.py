#!/usr/bin/env python3
"""Tokenizer throughput: myriad's readers of published tokenizer formats against the reference libraries on the
same text, one thread each, in the same run (ratios: this machine is noisy).

Usage: build/pyenv/bin/python scripts/tokenizer_bench.py [MYRIAD] [--work DIR] [--repeat N]

Tokenizers come from tests/interop/tokenizer_fixtures.py (trained by PyPI's tokenizers on tinyshakespeare, written
in Hugging Face's layout, and Kimi's tiktoken layout): llama3-style and deepseek-style tokenizer.json against
`tokenizers`, kimi tiktoken.model against `tiktoken`. The text: ../shared/data/tinyshakespeare.txt (1.1 MB of
English) and a multilingual text (CJK, Cyrillic, Arabic, emoji, code) of about 1 MB. myriad's time is its encoding
only (`myriad tokenizer encode --time`, not process start or loading); the references' is one encode call on the
whole text. Best of --repeat runs each.
"""
import argparse
import os
import subprocess
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
import tokenizer_fixtures as fx  # noqa: E402


def myriad_seconds(myriad, tok, text_bytes, extra=()):
    r = subprocess.run([myriad, "tokenizer", "encode", "--tokenizer", tok, "--time", *extra], input=text_bytes,
                       capture_output=True, check=True)
    line = r.stderr.decode().strip().splitlines()[-1]
    # "encoded B bytes into T tokens in S s: ..."
    words = line.split()
    return float(words[words.index("in", 5) + 1]), int(words[4])


def best(fn, repeat):
    return min(fn() for _ in range(repeat))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("myriad", nargs="?", default=os.path.join(HERE, "..", "build", "release", "myriad"))
    ap.add_argument("--work", default="/tmp/myriad_tokenizer_bench")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    shared = os.path.join(HERE, "..", "..", "shared")
    lines = fx.training_lines(shared)
    english = open(os.path.join(shared, "data", "tinyshakespeare.txt"), encoding="utf-8").read()
    multilingual = "\n".join(fx.MULTILINGUAL) * 900
    built = {"llama3": fx.build_llama3(os.path.join(a.work, "llama3"), lines),
             "deepseek": fx.build_deepseek(os.path.join(a.work, "deepseek"), lines)}
    kimi = fx.build_kimi(os.path.join(a.work, "kimi"), os.path.join(a.work, "llama3"))
    print(f"{'tokenizer':10} {'text':13} {'MB':>5} {'tokens':>8} {'myriad MB/s':>12} {'reference':>12} {'ref MB/s':>9}"
          f" {'myriad/ref':>10}")
    for text_name, text in (("english", english), ("multilingual", multilingual)):
        data = text.encode("utf-8")
        mb = len(data) / 1e6
        for name, ref in list(built.items()) + [("kimi", kimi)]:
            tok = os.path.join(a.work, name)
            ms = best(lambda: myriad_seconds(a.myriad, tok, data)[0], a.repeat)
            n = myriad_seconds(a.myriad, tok, data)[1]
            if name == "kimi":
                def ref_run():
                    t0 = time.perf_counter()
                    ref.encode(text, allowed_special="all")
                    return time.perf_counter() - t0
                ref_name = "tiktoken"
            else:
                def ref_run():
                    t0 = time.perf_counter()
                    ref.encode(text, add_special_tokens=False)
                    return time.perf_counter() - t0
                ref_name = "tokenizers"
            rs = best(ref_run, a.repeat)
            print(f"{name:10} {text_name:13} {mb:5.2f} {n:8d} {mb / ms:12.2f} {ref_name:>12} {mb / rs:9.2f}"
                  f" {rs / ms:10.2f}x")


if __name__ == "__main__":
    main()
