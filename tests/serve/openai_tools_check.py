#!/usr/bin/env python3
"""Tool calling end to end with the official `openai` client on a trained agent (make demo-agent's SFT or GRPO
model; not part of ctest: it needs that model). Serves MODEL_DIR, sends N held-out tool tasks' user messages
with the built-in tools (from `myriad agent demos --split held-out`), and for each: the first reply must be
message.tool_calls the client parses (function name among the tools, JSON arguments), streamed deltas must merge
into the same calls, and the conversation continues with the tool's result (computed here from the demo's
reference: the same tool, the same world) to a final text answer. Prints the share of replies that are valid
calls, of right first calls, and of right final answers.

usage: openai_tools_check.py MYRIAD MODEL_DIR WORK_DIR [--n N]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading

import openai

p = argparse.ArgumentParser()
p.add_argument("myriad")
p.add_argument("model")
p.add_argument("work")
p.add_argument("--n", type=int, default=24)
a = p.parse_args()
os.makedirs(a.work, exist_ok=True)
demos = os.path.join(a.work, "heldout.jsonl")
subprocess.run([a.myriad, "agent", "demos", "--out", demos, "--n", str(a.n), "--seed", "77", "--split", "held-out"],
               check=True, stdout=subprocess.DEVNULL)
convs = [json.loads(l) for l in open(demos)]
server = subprocess.Popen([a.myriad, "serve", "--model", a.model, "--port", "0", "--served-model-name", "agent"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
m = re.search(r"http://127\.0\.0\.1:(\d+)", server.stdout.readline())
if not m:
    print("FAIL: myriad serve did not start")
    sys.exit(1)
threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
client = openai.OpenAI(base_url=f"http://127.0.0.1:{m.group(1)}/v1", api_key="none", max_retries=5, timeout=60)
valid = right_call = answered = stream_same = 0
try:
    for c in convs:
        msgs, tools = c["messages"], c["tools"]
        names = {t["function"]["name"] for t in tools}
        want = msgs[1]["tool_calls"][0]["function"]
        r = client.chat.completions.create(model="agent", messages=msgs[:1], tools=tools, max_tokens=64, temperature=0)
        calls = r.choices[0].message.tool_calls or []
        ok = r.choices[0].finish_reason == "tool_calls" and calls and all(
            t.function.name in names and isinstance(json.loads(t.function.arguments), dict) for t in calls)
        valid += bool(ok)
        if ok and calls[0].function.name == want["name"] and json.loads(calls[0].function.arguments) == json.loads(
                want["arguments"]):
            right_call += 1
        merged = {}
        for ch in client.chat.completions.create(model="agent", messages=msgs[:1], tools=tools, max_tokens=64,
                                                 temperature=0, stream=True):
            for d in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
                e = merged.setdefault(d.index, {"name": "", "arguments": ""})
                e["name"] += d.function.name or "" if d.function else ""
                e["arguments"] += d.function.arguments or "" if d.function else ""
        stream_same += [(e["name"], e["arguments"]) for _, e in sorted(merged.items())] == [
            (t.function.name, t.function.arguments) for t in calls]
        # Continue the reference conversation (its calls and results) to the final answer.
        final = client.chat.completions.create(model="agent", messages=msgs[:-1], tools=tools, max_tokens=32,
                                               temperature=0)
        got = (final.choices[0].message.content or "").strip().rstrip(".")
        answered += got == msgs[-1]["content"]
finally:
    server.terminate()
    server.wait(timeout=30)
n = len(convs)
print(f"tool calls through the openai client on {n} held-out tasks: {valid}/{n} valid calls, {right_call}/{n} "
      f"right first calls, {stream_same}/{n} streams merge to the same calls, {answered}/{n} right final answers "
      "given the reference's tool results")
sys.exit(0 if valid > 0 and stream_same == n else 1)
