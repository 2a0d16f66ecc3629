#!/usr/bin/env python3
"""Prefix reuse as long contexts are used (issue 17; a benchmark, not a test). Starts `myriad serve` on a model and
measures, through the OpenAI chat API (streamed, usage included):

  multi-turn   a conversation over a long document (--history tokens) that grows turn by turn (--turns): per turn
               the prompt tokens, the tokens reused from the prefix cache (usage.prompt_tokens_details.cached_tokens),
               the tokens prefilled (prompt - cached) and the time to first token;
  shared doc   --questions fresh conversations that each ask one question about another document of the same
               length: the first is cold, the others should reuse the document.

Each measurement is repeated with prefix reuse off (--prefix-every 0) on a second server, as the baseline, so the
figures are compared under the same conditions in the same run. Prints tables and a summary.

  scripts/prefix_reuse_bench.py MYRIAD MODEL_DIR [--tokenizer DIR] [--history 32768] [--turns 20] [--questions 8]
      [--prefix-every 256] [--cache-mb 4096] [--text FILE]

MODEL_DIR's max_position_embeddings must hold the history plus the turns. The document is FILE's text (default
../shared/data/tinyshakespeare.txt when it exists), repeated as needed, else generated words.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request


def start_server(myriad, model, tokenizer, prefix_every, cache_mb, prefix_cache_mb):
    cmd = [myriad, "serve", "--model", model, "--port", "0", "--cache-mb", str(cache_mb), "--prefix-every",
           str(prefix_every), "--prefix-cache-mb", str(prefix_cache_mb), "--prefill-chunk", "512"]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            base = f"http://127.0.0.1:{m.group(1)}"
            while time.time() < deadline:  # the model loads after the socket opens: /health answers 200 then
                try:
                    with urllib.request.urlopen(base + "/health", timeout=5) as r:
                        if r.status == 200:
                            return p, base
                except Exception:
                    time.sleep(0.2)
            break
    p.kill()
    raise SystemExit("the server did not start: " + (line or "no output"))


MODEL = {}


def model_id(base):
    if base not in MODEL:
        with urllib.request.urlopen(base + "/v1/models") as r:
            MODEL[base] = json.loads(r.read())["data"][0]["id"]
    return MODEL[base]


def chat(base, messages, max_tokens):
    """One streamed chat completion: (text, usage, seconds to the first content, total seconds)."""
    body = json.dumps({"model": model_id(base), "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    t0 = time.time()
    ttft, text, usage = None, [], None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                piece = ch.get("delta", {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.time() - t0
                    text.append(piece)
    total = time.time() - t0
    return "".join(text), usage, ttft if ttft is not None else total, total


def tokens_of(base, text):
    req = urllib.request.Request(base + "/tokenize", json.dumps({"model": model_id(base), "prompt": text}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return len(json.loads(r.read())["tokens"])


def document(base, text, want_tokens):
    """A prefix of `text` (repeated) of about want_tokens tokens."""
    while tokens_of(base, text) < want_tokens:
        text = text + "\n" + text
    lo, hi = 0, len(text)
    while hi - lo > 200:  # bisect on characters
        mid = (lo + hi) // 2
        if tokens_of(base, text[:mid]) < want_tokens:
            lo = mid
        else:
            hi = mid
    return text[:lo]


def run(base, doc, doc2, turns, questions):
    out = {"turns": [], "questions": []}
    messages = [{"role": "system", "content": "Answer questions about this document.\n\n" + doc}]
    for k in range(turns):
        messages.append({"role": "user", "content": f"Question {k + 1}: who speaks next, and why?"})
        text, usage, ttft, total = chat(base, messages, 24)
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        out["turns"].append({"prompt": usage["prompt_tokens"], "cached": cached,
                             "prefilled": usage["prompt_tokens"] - cached, "ttft": ttft, "total": total})
        messages.append({"role": "assistant", "content": text})
    for q in range(questions):
        msgs = [{"role": "system", "content": "Answer questions about this document.\n\n" + doc2},
                {"role": "user", "content": f"Question {q + 1}: name one person in the document."}]
        _, usage, ttft, total = chat(base, msgs, 8)
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        out["questions"].append({"prompt": usage["prompt_tokens"], "cached": cached,
                                 "prefilled": usage["prompt_tokens"] - cached, "ttft": ttft})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("myriad")
    ap.add_argument("model")
    ap.add_argument("--tokenizer", default="")
    ap.add_argument("--history", type=int, default=32768)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--prefix-every", type=int, default=256)
    ap.add_argument("--cache-mb", type=int, default=4096)
    ap.add_argument("--prefix-cache-mb", type=int, default=2048)
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "../../shared/data/tinyshakespeare.txt"))
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    text = open(a.text).read() if os.path.exists(a.text) else " ".join(f"word{i % 977}" for i in range(200000))
    results = {}
    for label, every in (("reuse", a.prefix_every), ("no reuse", 0)):
        server, base = start_server(a.myriad, a.model, a.tokenizer, every, a.cache_mb, a.prefix_cache_mb)
        try:
            doc = document(base, text, a.history)
            doc2 = document(base, text[len(text) // 2:] + "\n" + text, a.history)  # another one: its first is cold
            results[label] = run(base, doc, doc2, a.turns, a.questions)
        finally:
            server.terminate()
            server.wait(timeout=60)
    r, b = results["reuse"], results["no reuse"]
    print(f"\nmulti-turn: {a.turns} turns over a {a.history}-token document (prefix_every {a.prefix_every})")
    print(f"{'turn':>4} {'prompt':>7} {'cached':>7} {'prefilled':>9} {'TTFT s':>7} {'TTFT s, no reuse':>16}")
    for k, (t, n) in enumerate(zip(r["turns"], b["turns"])):
        print(f"{k + 1:>4} {t['prompt']:>7} {t['cached']:>7} {t['prefilled']:>9} {t['ttft']:>7.2f} {n['ttft']:>16.2f}")
    later = r["turns"][1:]
    hit = sum(t["cached"] for t in later) / max(1, sum(t["prompt"] for t in later))
    mean_pref = sum(t["prefilled"] for t in later) / max(1, len(later))
    ttft_r = sum(t["ttft"] for t in later) / max(1, len(later))
    ttft_b = sum(t["ttft"] for t in b["turns"][1:]) / max(1, len(b["turns"]) - 1)
    print(f"turns 2..{a.turns}: hit rate {100 * hit:.1f}%, mean prefilled tokens per turn {mean_pref:.0f}, "
          f"mean TTFT {ttft_r:.2f} s vs {ttft_b:.2f} s without reuse ({ttft_b / max(ttft_r, 1e-9):.1f}x)")
    q, qb = r["questions"], b["questions"]
    print(f"\nshared document: {a.questions} questions; first (cold) TTFT {q[0]['ttft']:.2f} s")
    qhit = sum(x["cached"] for x in q[1:]) / max(1, sum(x["prompt"] for x in q[1:]))
    qt = sum(x["ttft"] for x in q[1:]) / max(1, len(q) - 1)
    qtb = sum(x["ttft"] for x in qb[1:]) / max(1, len(qb) - 1)
    print(f"questions 2..{a.questions}: hit rate {100 * qhit:.1f}%, mean TTFT {qt:.2f} s vs {qtb:.2f} s without "
          f"reuse ({qtb / max(qt, 1e-9):.1f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
