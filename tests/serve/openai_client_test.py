#!/usr/bin/env python3
"""`myriad serve` end to end with the official `openai` Python client (PyPI), curl, and a bounded load test.

The model: configs/tiny.json with random weights (`myriad init`) and a tokenizer trained here (`myriad tokenizer
train`) on generated text; the config's vocab_size is set to the tokenizer's, so every id the model samples decodes.
The server starts on a free port (--port 0; the port is read from its first line) with an API key, and must answer
/health 503 or 200 at once (it listens before the model is loaded), then 200.

Checks: models.list; chat and completions, non-streaming and streaming (greedy: the streamed text equals the
non-streamed text; one id per stream; usage in the last chunk with stream_options.include_usage); logprobs in
OpenAI's shapes; seeds reproduce; vLLM-style extras through extra_body; errors raise the right exceptions
(BadRequestError for max_tokens 0, n 2 and a negative temperature, NotFoundError for an unknown model,
AuthenticationError for a wrong key); curl, plain and streaming; `myriad chat` with piped stdin replies, turn by
turn (history, /reset, /quit), exactly what the server answers for the same conversation (greedy).

Load test (bounded): N client threads for S seconds, mixing chat and completions, streaming or not, 4-32 tokens,
some streams dropped after their first chunk (their requests must be cancelled). It must end with zero 5xx
responses and, once idle, no running or waiting request, the engine's cache bytes back at their idle level and the
server's RSS back near its idle level.
It prints requests/s, tokens/s and latency percentiles.

SIGTERM while four long streams run: the server exits 0 within its shutdown grace (0.2 s) plus a bound, and every
stream ends. With --soak-minutes M, then M minutes of moderate load (8 clients, 0.2 s between requests) with the
server's RSS sampled each minute: no growth, and back near idle afterwards.

usage: openai_client_test.py MYRIAD_BINARY REPO_ROOT WORK_DIR [--clients N] [--seconds S] [--soak-minutes M]
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

parser = argparse.ArgumentParser()
parser.add_argument("myriad")
parser.add_argument("root")
parser.add_argument("work")
parser.add_argument("--clients", type=int, default=8)
parser.add_argument("--seconds", type=float, default=10.0)
parser.add_argument("--soak-minutes", type=float, default=0, help="then this many minutes of moderate load")
parser.add_argument("--soak-clients", type=int, default=8)
parser.add_argument("--rss-slack-mb", type=float, default=8,
                    help="RSS allowed over idle after a burst; negative: not checked (sanitizer builds)")
parser.add_argument("--sanitized", action="store_true",
                    help="a sanitizer build (3-20x slower): the shutdown bound allows 8 s instead of 2 after the grace")
args = parser.parse_args()

KEY = "test-key-123"
GRACE = 0.2  # --shutdown-grace: seconds running requests may go on after SIGTERM (4 x 1800 tokens take longer)
NAME = "tiny-served"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
from interop_checks import Checks  # noqa: E402

check = Checks()


def http_get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(port):
    status, text = http_get(port, "/metrics")
    assert status == 200, status
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return -1


def thread_count(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def settle_threads(count, timeout=30):
    """Waits until the server runs no more threads than `count` (a burst's connection threads end after 10 s idle)."""
    deadline = time.time() + timeout
    while thread_count(server.pid) > count and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.2)  # the last one's memory release


def wait_idle(port, idle=None, timeout=30):
    """Metrics once no request runs or waits (and, given `idle`, the cache is back at its bytes): a stream's last
    chunk can reach its client a step before the engine frees its sequence."""
    deadline = time.time() + timeout
    m = metrics(port)
    while time.time() < deadline and (m["myriad_requests_running"] or m["myriad_requests_waiting"] or (
            idle is not None and m["myriad_cache_bytes_used"] != idle["myriad_cache_bytes_used"])):
        time.sleep(0.05)
        m = metrics(port)
    return m


def run_load(port, clients, seconds, think=0.0):
    """`clients` threads for `seconds`, each sending chat or completion requests, streaming or not, 4-32 tokens,
    a fifth of the streams hung up after their first chunk (their requests must be cancelled); `think` seconds
    between a client's requests. Returns the counts, latency percentiles (ms) and the server's peak RSS."""
    lock = threading.Lock()
    latencies, statuses, tokens, peak = [], {}, [0], [rss_mb(server.pid)]
    stop_at = time.time() + seconds

    def worker(i):
        r = random.Random(100 + i + int(time.time() * 1000))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.time() < stop_at:
            chat_req = r.random() < 0.5
            stream_req = r.random() < 0.5
            drop = stream_req and r.random() < 0.2  # hang up after the first chunk
            req = {"model": NAME, "max_tokens": r.randint(4, 32), "temperature": 0.8, "seed": r.randint(0, 1 << 30),
                   "stream": stream_req, "ignore_eos": True}
            if chat_req:
                req["messages"] = [{"role": "user", "content": " ".join(r.choice(words) for _ in range(r.randint(3, 30)))}]
            else:
                req["prompt"] = " ".join(r.choice(words) for _ in range(r.randint(3, 60)))
            if stream_req:
                req["stream_options"] = {"include_usage": True}
            path = "/v1/chat/completions" if chat_req else "/v1/completions"
            t0 = time.time()
            try:
                conn.request("POST", path, json.dumps(req), {"Authorization": f"Bearer {KEY}",
                                                             "Content-Type": "application/json"})
                resp = conn.getresponse()
                if drop and resp.status == 200:
                    resp.read(1)
                    conn.close()  # the server must cancel the request
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    with lock:
                        statuses["dropped"] = statuses.get("dropped", 0) + 1
                    continue
                payload = resp.read().decode()
                n = 0
                if resp.status == 200:
                    if stream_req:
                        last = [l for l in payload.splitlines() if l.startswith("data: {")][-1]
                        n = json.loads(last[6:])["usage"]["completion_tokens"]
                    else:
                        n = json.loads(payload)["usage"]["completion_tokens"]
                with lock:
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    if resp.status == 200:
                        latencies.append(time.time() - t0)
                        tokens[0] += n
            except Exception as e:  # noqa: BLE001: a transport error is counted, not raised
                with lock:
                    statuses[f"error {type(e).__name__}"] = statuses.get(f"error {type(e).__name__}", 0) + 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            if think:
                time.sleep(think)
        conn.close()

    def sample_rss():
        while time.time() < stop_at:
            peak[0] = max(peak[0], rss_mb(server.pid))
            time.sleep(0.5)

    t_start = time.time()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    threads.append(threading.Thread(target=sample_rss))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t_start
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000 if latencies else float("nan")

    return {"elapsed": elapsed, "done": len(latencies), "tokens": tokens[0], "statuses": statuses,
            "p50": pct(50), "p90": pct(90), "p99": pct(99), "rss_peak": peak[0],
            "fivexx": sum(v for k, v in statuses.items() if isinstance(k, int) and k >= 500),
            "errors": sum(v for k, v in statuses.items() if isinstance(k, str) and k.startswith("error"))}


# ---- the model -----------------------------------------------------------------------------------------------------
shutil.rmtree(args.work, ignore_errors=True)
os.makedirs(args.work)
model_dir = os.path.join(args.work, NAME)
rng = random.Random(7)
words = ("the a cat dog bird sat ran flew on over under mat tree house quickly slowly and then it was is "
         "big small red blue green one two three four five six seven eight nine ten").split()
corpus = os.path.join(args.work, "corpus.txt")
with open(corpus, "w") as f:
    for _ in range(3000):
        f.write(" ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) + ".\n")
subprocess.run([args.myriad, "tokenizer", "train", "--data", corpus, "--vocab", "400", "--out",
                os.path.join(model_dir, "tokenizer")], check=True, stdout=subprocess.DEVNULL)
vocab = json.load(open(os.path.join(model_dir, "tokenizer", "tokenizer.json")))["vocab_size"]
config = json.load(open(os.path.join(args.root, "configs", "tiny.json")))
config["vocab_size"] = vocab
config_path = os.path.join(args.work, "config.json")
json.dump(config, open(config_path, "w"), indent=1)
subprocess.run([args.myriad, "init", "--config", config_path, "--out", model_dir, "--seed", "3"], check=True,
               stdout=subprocess.DEVNULL)

# ---- the server ----------------------------------------------------------------------------------------------------
env = dict(os.environ, MYRIAD_THREADS="2")
server = subprocess.Popen([args.myriad, "serve", "--model", model_dir, "--port", "0", "--api-key", KEY,
                           "--max-batch", "8", "--cache-mb", "256", "--shutdown-grace", str(GRACE)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
first = server.stdout.readline()
m = re.search(r"http://127\.0\.0\.1:(\d+)", first)
if not m:
    print("FAIL: no listening line from myriad serve:", first, server.stdout.read(), flush=True)
    server.kill()
    sys.exit(1)
port = int(m.group(1))
log_lines = []
threading.Thread(target=lambda: [log_lines.append(l) for l in server.stdout], daemon=True).start()
status, _ = http_get(port, "/health")
check(status in (200, 503), f"/health answers at once ({status}: 503 while loading, 200 when ready)")
deadline = time.time() + 60
while http_get(port, "/health")[0] != 200 and time.time() < deadline:
    time.sleep(0.05)
check(http_get(port, "/health")[0] == 200, "/health 200 once the model is loaded")

base_url = f"http://127.0.0.1:{port}/v1"
client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=60)
try:
    # ---- the openai client -----------------------------------------------------------------------------------------
    ids = [m.id for m in client.models.list()]
    check(ids == [NAME], f"models.list() = {ids}")

    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count to three."}]
    chat = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0)
    c0 = chat.choices[0]
    check(chat.object == "chat.completion" and c0.message.role == "assistant" and isinstance(c0.message.content, str),
          "chat completion shape")
    check(c0.finish_reason in ("stop", "length"), f"chat finish_reason {c0.finish_reason}")
    u = chat.usage
    check(u.total_tokens == u.prompt_tokens + u.completion_tokens and 0 < u.completion_tokens <= 12,
          f"chat usage {u.prompt_tokens} + {u.completion_tokens} = {u.total_tokens}")

    stream = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == c0.message.content, "streamed chat text equals the non-streamed text")
    check(len({ch.id for ch in chunks}) == 1, "one id across the chat stream")
    check(chunks[0].choices[0].delta.role == "assistant", "the role in the first delta")
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check(finishes == [c0.finish_reason], f"finish_reason once, on the last choice chunk: {finishes}")
    check(chunks[-1].usage is not None and chunks[-1].usage.total_tokens == u.total_tokens and not chunks[-1].choices,
          "usage chunk last (choices: [])")

    comp = client.completions.create(model=NAME, prompt="the cat sat on", max_tokens=10, temperature=0, logprobs=2)
    lp = comp.choices[0].logprobs
    check(comp.object == "text_completion" and len(lp.tokens) == comp.usage.completion_tokens
          and len(lp.token_logprobs) == len(lp.tokens) and len(lp.top_logprobs) == len(lp.tokens)
          and len(lp.text_offset) == len(lp.tokens), "completion with logprobs (tokens, token_logprobs, top_logprobs)")
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=NAME, prompt="the cat sat on", max_tokens=10, temperature=0, stream=True) if ch.choices)
    check(streamed == comp.choices[0].text, "streamed completion equals the non-streamed one")

    chat_lp = client.chat.completions.create(model=NAME, messages=messages, max_tokens=5, temperature=0,
                                             logprobs=True, top_logprobs=2)
    content = chat_lp.choices[0].logprobs.content
    check(len(content) == chat_lp.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content)
          and all(t.logprob <= 0 for t in content), "chat logprobs: one entry per token, two alternatives each")

    a, b = (client.completions.create(model=NAME, prompt="one two", max_tokens=8, temperature=0.9, seed=42)
            for _ in range(2))
    check(a.choices[0].text == b.choices[0].text, "the same seed gives the same sample")
    extra = client.completions.create(model=NAME, prompt="one two", max_tokens=4, temperature=0.8,
                                      extra_body={"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1})
    check(extra.usage.completion_tokens >= 1, "top_k / min_p / repetition_penalty through extra_body")

    # Tools: this random model writes no well-formed call, so "required" (a forced <|tool_call|>) comes back as
    # text or as calls the client parses; never an error. tests/serve/openai_tools_check.py runs the real thing
    # on a trained agent (make demo-agent).
    tools = [{"type": "function", "function": {"name": "lookup_price", "description": "price of one item",
                                                "parameters": {"type": "object",
                                                               "properties": {"item": {"type": "string"}}}}}]
    tmsgs = [{"role": "user", "content": "Price of apple?"}]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "lookup_price"}}, "none"):
        r = client.chat.completions.create(model=NAME, messages=tmsgs, tools=tools, tool_choice=choice, max_tokens=8,
                                           temperature=0)
        m0 = r.choices[0]
        calls_ok = all(tc.function.name == "lookup_price" and isinstance(json.loads(tc.function.arguments), dict)
                       for tc in (m0.message.tool_calls or []))
        check(m0.finish_reason in ("stop", "length", "tool_calls") and calls_ok, f"tools, tool_choice {choice}")
        streamed = list(client.chat.completions.create(model=NAME, messages=tmsgs, tools=tools, tool_choice=choice,
                                                       max_tokens=8, temperature=0, stream=True))
        fins = [ch.choices[0].finish_reason for ch in streamed if ch.choices and ch.choices[0].finish_reason]
        check(fins == [m0.finish_reason], f"streamed tools ({choice}): finish {fins} vs {m0.finish_reason}")
    history = tmsgs + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup_price", "arguments": "{\"item\": \"apple\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "0.5"}]
    r = client.chat.completions.create(model=NAME, messages=history, tools=tools, max_tokens=4, temperature=0)
    check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), "a conversation with a call and its result")

    def expect(exc, code_or_none, fn, what):
        try:
            fn()
            check(False, f"{what}: no error raised")
        except exc as e:
            ok = code_or_none is None or e.code == code_or_none
            check(ok, f"{what}: {type(e).__name__} {e.status_code} (code {e.code})")
        except Exception as e:  # noqa: BLE001: the wrong exception is the failure being tested
            check(False, f"{what}: raised {type(e).__name__}: {e}")

    expect(openai.BadRequestError, None, lambda: client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=0), "max_tokens 0")
    expect(openai.NotFoundError, "model_not_found", lambda: client.chat.completions.create(
        model="gpt-nope", messages=messages, max_tokens=4), "unknown model")
    expect(openai.BadRequestError, None, lambda: client.completions.create(
        model=NAME, prompt="x", max_tokens=4, temperature=-1), "negative temperature")
    expect(openai.BadRequestError, None, lambda: client.completions.create(
        model=NAME, prompt="x", max_tokens=4, n=2), "n = 2")
    expect(openai.BadRequestError, "context_length_exceeded", lambda: client.completions.create(
        model=NAME, prompt="x", max_tokens=5000), "prompt + max_tokens past the context")
    expect(openai.BadRequestError, None, lambda: client.chat.completions.create(
        model=NAME, messages=tmsgs, tools=tools, max_tokens=4,
        tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice names no tool")
    expect(openai.BadRequestError, None, lambda: client.chat.completions.create(
        model=NAME, messages=tmsgs, max_tokens=4, tool_choice="required"), "tool_choice without tools")
    bad_key = openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0)
    expect(openai.AuthenticationError, "invalid_api_key", lambda: bad_key.models.list(), "wrong API key")

    # ---- curl ------------------------------------------------------------------------------------------------------
    body = json.dumps({"model": NAME, "prompt": "the dog", "max_tokens": 5, "temperature": 0})
    out = subprocess.run(["curl", "-sS", "-H", f"Authorization: Bearer {KEY}", "-H", "Content-Type: application/json",
                          "-d", body, f"{base_url}/completions"], capture_output=True, text=True, timeout=30)
    r = json.loads(out.stdout)
    check(r["object"] == "text_completion" and r["usage"]["prompt_tokens"] > 0, "curl: completion")
    body = json.dumps({"model": NAME, "messages": messages, "max_tokens": 5, "stream": True})
    out = subprocess.run(["curl", "-sSN", "-H", f"Authorization: Bearer {KEY}", "-H", "Content-Type: application/json",
                          "-d", body, f"{base_url}/chat/completions"], capture_output=True, text=True, timeout=30)
    data = [l[6:] for l in out.stdout.splitlines() if l.startswith("data: ")]
    check(len(data) >= 3 and data[-1] == "[DONE]" and json.loads(data[0])["object"] == "chat.completion.chunk",
          "curl: chat stream ends with [DONE]")
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-d", body,
                          f"{base_url}/chat/completions"], capture_output=True, text=True, timeout=30)
    check(out.stdout == "401", f"curl without the key: {out.stdout}")

    # ---- `myriad chat`: the same template and history as the server (greedy, piped stdin) --------------------------
    def served(msgs):
        return client.chat.completions.create(model=NAME, messages=msgs, max_tokens=8,
                                              temperature=0).choices[0].message.content

    out = subprocess.run([args.myriad, "chat", "--model", model_dir, "--temperature", "0", "--max-tokens", "8",
                          "--system", "Be brief."], input=b"hi\nand then?\n/reset\nhello\n/quit\nnever read\n",
                         capture_output=True, timeout=60, env=env)
    r1 = served([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    r2 = served([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                 {"role": "assistant", "content": r1}, {"role": "user", "content": "and then?"}])
    r3 = served([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}])
    got = out.stdout.decode("utf-8", "replace")
    same = out.returncode == 0 and got == f"{r1}\n{r2}\n{r3}\n"
    check(same, "myriad chat (piped: history, /reset, /quit) replies as the server does"
          + ("" if same else f": exit {out.returncode}, {got!r} vs {[r1, r2, r3]!r}"))

    # ---- the load test ---------------------------------------------------------------------------------------------
    idle = wait_idle(port)
    rss_before, threads_before = rss_mb(server.pid), thread_count(server.pid)
    r = run_load(port, args.clients, args.seconds)
    after = wait_idle(port, idle)
    settle_threads(threads_before)
    rss_after = rss_mb(server.pid)
    print(f"load: {args.clients} clients x {r['elapsed']:.1f} s: {r['done']} completed requests, "
          f"{r['done'] / r['elapsed']:.1f} req/s, {r['tokens'] / r['elapsed']:.0f} generated tokens/s; latency p50 "
          f"{r['p50']:.0f} ms, p90 {r['p90']:.0f} ms, p99 {r['p99']:.0f} ms; statuses {r['statuses']}; server RSS "
          f"{rss_before:.0f} -> {r['rss_peak']:.0f} (peak) -> {rss_after:.0f} MiB", flush=True)
    check(r["done"] > 0, f"load: {r['done']} requests completed")
    check(r["fivexx"] == 0 and r["errors"] == 0, f"load: zero 5xx and transport errors ({r['fivexx']}, {r['errors']})")
    check(after["myriad_requests_running"] == 0 and after["myriad_requests_waiting"] == 0,
          "load: no request running or waiting afterwards")
    check(after["myriad_cache_bytes_used"] == idle["myriad_cache_bytes_used"]
          and after["myriad_cache_bytes_reserved"] == idle["myriad_cache_bytes_reserved"],
          f"load: cache bytes back at idle ({after['myriad_cache_bytes_used']:.0f} used, "
          f"{after['myriad_cache_bytes_reserved']:.0f} reserved)")
    # NOTE: 8 MiB over the idle level, once the burst's connection threads have ended (10 s idle, each giving its
    # allocator cache back): allocator metadata and fragmentation; the burst itself took 40+ MiB at 64 clients, and
    # a leak of the requests' tensors or pages would stay.
    if args.rss_slack_mb >= 0:
        check(rss_after <= rss_before + args.rss_slack_mb,
              f"load: server RSS back near idle ({rss_before:.0f} -> {rss_after:.0f} MiB)")
    print(f"load: {r['statuses'].get('dropped', 0)} streams dropped by their clients; the engine cancelled "
          f"{after['myriad_requests_cancelled_total'] - idle['myriad_requests_cancelled_total']:.0f} requests "
          "(a short one may finish before the server notices)", flush=True)

    # ---- the soak (only with --soak-minutes): moderate load, RSS sampled each minute -----------------------------
    if args.soak_minutes > 0:
        samples = []
        for minute in range(int(args.soak_minutes)):
            s_r = run_load(port, args.soak_clients, 60.0, think=0.2)
            samples.append(rss_mb(server.pid))
            print(f"soak: minute {minute + 1}: {s_r['done']} requests, p99 {s_r['p99']:.0f} ms, 5xx {s_r['fivexx']}, "
                  f"errors {s_r['errors']}, RSS {samples[-1]:.0f} MiB", flush=True)
            check(s_r["fivexx"] == 0 and s_r["errors"] == 0, f"soak: minute {minute + 1} without 5xx or errors")
        wait_idle(port, idle)
        settle_threads(threads_before)
        settled = rss_mb(server.pid)
        # No growth: the second half's samples no higher than the first half's highest plus 8 MiB (as above).
        half = max(1, len(samples) // 2)
        slack = args.rss_slack_mb if args.rss_slack_mb >= 0 else float("inf")
        check(max(samples[half:], default=0) <= max(samples[:half]) + slack and settled <= rss_before + slack,
              f"soak: RSS did not grow (per minute {[round(x) for x in samples]}, idle after {settled:.0f} MiB)")

    check(server.poll() is None, "the server is still running")

    # ---- SIGTERM under load: streams far longer than the grace end, the server exits 0 within the bound --------
    ended = []

    def long_stream(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        req = {"model": NAME, "prompt": "once upon a time", "max_tokens": 1800, "ignore_eos": True, "stream": True}
        try:
            conn.request("POST", "/v1/completions", json.dumps(req), {"Authorization": f"Bearer {KEY}"})
            resp = conn.getresponse()
            body = resp.read().decode()  # returns when the server ends the stream (or the connection)
            how = "length" if '"finish_reason":"length"' in body.replace(" ", "") else \
                "stopping" if "server_stopping" in body else "other"
            ended.append((how if body.rstrip().endswith("data: [DONE]") else how + " without [DONE]",
                          body.count("data: {")))
        except Exception as e:  # noqa: BLE001: an ended connection is what SIGTERM may do to a stream
            ended.append((type(e).__name__, 0))
        conn.close()

    streams = [threading.Thread(target=long_stream, args=(i,)) for i in range(4)]
    for t in streams:
        t.start()
    deadline = time.time() + 30
    while metrics(port)["myriad_requests_running"] < 4 and time.time() < deadline:
        time.sleep(0.02)
    t0 = time.time()
    server.terminate()
    try:
        rc = server.wait(timeout=GRACE + 10)
    except subprocess.TimeoutExpired:
        rc = "still running"
    took = time.time() - t0
    for t in streams:
        t.join(timeout=10)
    # NOTE: GRACE + 2 s: after the grace every handler notices within 100 ms and the threads join; the margin is
    # for a loaded 2-core machine. Under ASan (tests/timing_bounds.h: 3-20x slower) the exit took 3.3 s once beside
    # another test, so there 8 s: still far below what the 4 x 1800-token streams would take to finish (~20 s at
    # that build's ~370 tokens/s), which is the failure this catches.
    bound = GRACE + (8 if args.sanitized else 2)
    check(rc == 0 and took < bound, f"SIGTERM with 4 long streams running: exit {rc} after {took:.1f} s "
          f"(grace {GRACE} s, bound {bound} s)")
    check(len(ended) == 4 and all(how in ("length", "stopping") for how, _ in ended),
          f"every stream ended, finished or with a server_stopping error, then [DONE] ({ended})")
finally:
    client.close()
    if server.poll() is None:
        server.kill()
        server.wait()
    if check.failures:
        print("".join(log_lines[-20:]))

check.finish("openai_client")
