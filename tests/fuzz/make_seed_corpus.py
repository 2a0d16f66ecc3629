#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from real files: the repo's configs, the
demo run's tokenizer and trainer states, the reference safetensors writer's output, agent demonstrations and
request bodies shaped like the server tests'. Run once after a format changes; the output is committed.

    build/pyenv/bin/python tests/fuzz/make_seed_corpus.py MYRIAD_BINARY [RUN_DIR (default runs/demo)]
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from safetensors.numpy import save

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def main():
    myriad = sys.argv[1]
    run = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "runs", "demo")

    # safetensors: the reference writer's files (every dtype the reader takes, metadata, a scalar, an empty tensor).
    put("safetensors", save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}))
    put("safetensors", save({"a": np.ones((2, 2), dtype=np.float16), "b": np.arange(3, dtype=np.int64),
                             "s": np.array(2.5, dtype=np.float32), "e": np.zeros((2, 0), dtype=np.int32)},
                            metadata={"format": "pt"}))
    put("safetensors", save({"u": np.arange(5, dtype=np.uint8), "f": np.ones(3, dtype=np.float32)}))

    # The sharded index the writer makes for fuzz_checkpoint_index's fixture (a, b in shard 1; c, d in shard 2).
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    put("checkpoint_index", json.dumps({"metadata": {"total_size": 56}, "weight_map": {
        "a.weight": s1, "b.weight": s1, "c.weight": s2, "d.bias": s2}}, indent=2))
    put("checkpoint_index", json.dumps({"weight_map": {"a.weight": s1, "b.weight": s2}}))

    # Model and training configs: the repo's own and the flagship's published config.
    for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        with open(os.path.join(ROOT, "configs", name), "rb") as f:
            data = f.read()
        put("train_config" if name.endswith(".train.json") or name.startswith("agent.") else "model_config", data)
    shared = os.path.join(ROOT, "..", "shared", "data", "kimi-k3-config.json")
    if os.path.exists(shared):
        with open(shared, "rb") as f:
            put("model_config", f.read())

    # The demo run's tokenizer model; multilingual text to encode.
    with open(os.path.join(run, "tokenizer", "tokenizer.model"), "rb") as f:
        put("tokenizer_model", f.read())
    for text in ["In the morning, the king rode out.", "Q: 23 + 45 = ? A: 68", "copy: q w e r -> q w e r",
                 "日本語のテキスト、中文，한국어 🙂🚀", "def f(x):\n\treturn x ** 2  # code\n",
                 "<|user|>hi<|endoftext|><|assistant|>", b"\xff\xfe invalid \xc3\x28 utf-8 \x00 nul".decode("latin-1")]:
        put("tokenizer_text", text.encode("latin-1") if "invalid" in text else text)

    # Token shards: the format's 32-byte header and u16 tokens (as write_shard writes them).
    for n in (0, 1, 40):
        tokens = np.array([(i * 37) % 400 for i in range(n)], dtype="<u2")
        put("token_shard", b"MYRTOKS\0" + struct.pack("<IIQQ", 1, 1, n, 0) + tokens.tobytes())

    # Conversations: agent demonstrations as myriad writes them (tool calls, tool results, a system tools line).
    with tempfile.TemporaryDirectory() as tmp:
        demos = os.path.join(tmp, "demos.jsonl")
        subprocess.run([myriad, "agent", "demos", "--out", demos, "--n", "4"], check=True, capture_output=True)
        with open(demos) as f:
            lines = f.read().splitlines()
        for line in lines:
            put("conversations", line + "\n")
            conv = json.loads(line)
            for m in conv["messages"]:
                if m["role"] != "assistant":
                    continue
                text = m.get("content") or ""
                for call in m.get("tool_calls") or []:
                    fn = call["function"]
                    text += '<|tool_call|>{"name":%s,"arguments":%s}<|/tool_call|>' % (json.dumps(fn["name"]),
                                                                                          fn["arguments"])
                put("assistant_reply", text + "<|endoftext|>")
                req = {"model": "tiny", "messages": conv["messages"][:2], "tools": conv.get("tools", []),
                       "tool_choice": "auto", "max_tokens": 8, "temperature": 0}
                put("openai_request", json.dumps(req))
    put("assistant_reply", '<|tool_call|>{"name":"calculator","arguments":{"expression":"(3*0.5+2)/7"}}<|/tool_call|>')
    put("assistant_reply", '<|tool_call|>{"name":"calendar","arguments":{"date":"2026-03-14","days":-40}}'
                           '<|/tool_call|><|tool_call|>{"name":"convert","arguments":{"value":"2.5","from":"km",'
                           '"to":"m"}}<|/tool_call|>')

    # Request bodies of every endpoint (the server tests' shapes).
    for body in [
        {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "stream": True,
         "stream_options": {"include_usage": True}, "temperature": 0.7, "top_p": 0.9, "seed": 3},
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [
            {"type": "text", "text": "hi"}]}], "logprobs": True, "top_logprobs": 2, "stop": ["\n", "."],
         "logit_bias": {"5": -100}, "frequency_penalty": 0.5, "presence_penalty": 0.1},
        {"prompt": "In the morning,", "max_tokens": 8, "top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1,
         "logprobs": 2, "ignore_eos": True},
        {"prompt": [[1, 2, 3, 4]], "max_tokens": 2},
        {"prompt": "copy: a b ->"},
        {"tokens": [5, 6, 7, 300]},
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {
            "name": "calculator", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}],
         "tool_choice": {"type": "function", "function": {"name": "calculator"}}, "parallel_tool_calls": False},
        {"messages": [{"role": "user", "content": "2 figs?"}], "tool_choice": "required", "tools": [
            {"type": "function", "function": {"name": "lookup_price", "strict": True, "parameters": {
                "type": "object", "required": ["item", "qty"], "properties": {
                    "item": {"enum": ["apple", "fig", 3, None]}, "qty": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "number"}}}},
                    "any": {"anyOf": [{"type": "string"}]}}}}}]},
    ]:
        put("openai_request", json.dumps(body))

    # Trainer states: the demo run's (pretraining, a loader position) and an SFT state (a conversation position).
    ck = os.path.join(run, "checkpoints")
    with open(os.path.join(ck, "latest")) as f:
        latest = f.read().strip()
    with open(os.path.join(ck, latest, "trainer_state.json"), "rb") as f:
        put("trainer_state", f.read())
    put("trainer_state", json.dumps({"step": 12, "skipped_total": 0, "consecutive_skips": 0, "tokens_seen": 4096,
                                     "data": {"epoch": 1, "position": 2, "seed": 3, "conversations": 5, "rows": 7}}))
    put("trainer_state", json.dumps({"step": 3, "skipped_total": 1, "consecutive_skips": 1, "tokens_seen": 96,
                                     "data": {"epoch": 0, "position": 32, "seed": 1, "seq_len": 16,
                                              "train_tokens": 1000}}))

    images()
    idx_files()


def png(w, h, rgb):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\0" + rgb[y * w * 3:(y + 1) * w * 3] for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def bmp(w, h, rgb):
    stride = (w * 3 + 3) // 4 * 4
    rows = b"".join(bytes(rgb[(y * w + x) * 3 + 2 - c] for x in range(w) for c in range(3)).ljust(stride, b"\0")
                    for y in reversed(range(h)))
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + len(rows), 0, 0, 14 + len(info)) + info + rows


def idx_files():
    """fuzz_idx: a small unsigned-byte IDX array, plain and gzip-compressed, and a labels-shaped one."""
    import gzip
    arr = b"\0\0\x08\x03" + struct.pack(">III", 2, 3, 4) + bytes(range(24))
    put("idx", arr)
    put("idx", gzip.compress(arr, mtime=0))
    put("idx", b"\0\0\x08\x01" + struct.pack(">I", 5) + bytes([7, 2, 1, 0, 4]))


def images():
    """fuzz_image: small PNG, BMP (refused: a format myriad does not read) and GIF files written here from their
    formats' layouts, a JPEG from stb_image_write and a lossless and a lossy WebP from libwebp when a C compiler
    and the libraries are at hand (those formats need an encoder)."""
    grad = bytes((x * 7 + y * 13 + c * 50) & 255 for y in range(30) for x in range(40) for c in range(3))
    put("image", png(40, 30, grad))
    put("image", png(3, 2, bytes(range(18))))
    put("image", bmp(40, 30, grad))
    put("image", b"GIF89a\x02\x00\x01\x00\x80\x00\x00\xff\x00\x00\x00\x00\xff,\x00\x00\x00\x00\x02\x00\x01"
                 b"\x00\x00\x02\x02\x44\x0a\x00;")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "w.c")
        with open(src, "w") as f:
            f.write('#include <stb_image_write.h>\nint main(void){unsigned char p[40*30*3];'
                    'for(int i=0;i<40*30*3;++i)p[i]=(unsigned char)(i*7);'
                    'return !stbi_write_jpg("' + os.path.join(d, "a.jpg") + '",40,30,3,p,80);}\n')
        if subprocess.run(["cc", src, "-I/usr/include/stb", "-lstb", "-o", os.path.join(d, "w")]).returncode == 0 \
                and subprocess.run([os.path.join(d, "w")]).returncode == 0:
            with open(os.path.join(d, "a.jpg"), "rb") as f:
                put("image", f.read())
        src = os.path.join(d, "webp.c")
        with open(src, "w") as f:
            f.write('#include <stdio.h>\n#include <webp/encode.h>\nint main(int c,char**v){unsigned char p[40*30*3];'
                    'for(int i=0;i<40*30*3;++i)p[i]=(unsigned char)(i*7);uint8_t*o;size_t n;FILE*f;'
                    'n=WebPEncodeLosslessRGB(p,40,30,120,&o);f=fopen(v[1],"wb");fwrite(o,1,n,f);fclose(f);WebPFree(o);'
                    'n=WebPEncodeRGB(p,40,30,120,80,&o);f=fopen(v[2],"wb");fwrite(o,1,n,f);fclose(f);WebPFree(o);'
                    'return 0;}\n')
        files = [os.path.join(d, "a.webp"), os.path.join(d, "b.webp")]
        if subprocess.run(["cc", src, "-lwebp", "-o", os.path.join(d, "webp")]).returncode == 0 \
                and subprocess.run([os.path.join(d, "webp"), *files]).returncode == 0:
            for name in files:
                with open(name, "rb") as f:
                    put("image", f.read())


if __name__ == "__main__":
    main()
