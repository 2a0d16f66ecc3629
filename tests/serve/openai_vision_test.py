#!/usr/bin/env python3
"""Images through `myriad serve` with the official `openai` Python client, and `myriad chat`'s /image.

The model: configs/tiny-vl.json (tiny's text model with a small vision tower, patch 14, 2 x 2 merge) with random
weights (`myriad init`) and a tokenizer trained here; a text-only twin (configs/tiny.json) for the refusals. Images
are PNGs written here (zlib + the PNG chunk layout: the test does not depend on an imaging library), sent as data:
URIs in image_url content parts.

Checks: a chat with an image answers; its prompt is the text's tokens plus one run of image placeholders (id 11,
<|image|>) of the length its grid gives (56 x 56 pixels -> 4 x 4 patches -> 4 tokens), the same count /tokenize
gives; two images of different sizes in one message; streaming equals non-streaming (greedy); the same image again
reuses the cached prefix (prompt_tokens_details.cached_tokens) and another image of the same size does not (the
prefix is keyed by the image's content); four requests with different images sent at once answer what each answers
alone (their images are encoded in one batch); refusals as 400 BadRequestError naming the part: a remote URL (never
fetched), a non-image media type, bad base64, a truncated PNG, more images than --max-images, an image for the text-only model
(its message names the missing vision tower); the server still answers afterwards. `myriad chat` with piped stdin:
"/image PATH" then a message replies what the server replies to the same conversation.

Videos: an animated GIF (written here: 4-colour frames, 3-bit LZW codes all literals) in a video_url part: 5 frames
of 56 x 56 are chunks of 4 and 1 frames, one run of 4 + 4 placeholders; the reply is the same streamed; a changed
frame changes the reply's cache key (`myriad chat`'s /video replies the same) (no prefix reuse past the text before it); a GIF of 20 one-pixel frames on a
4000 x 4000 canvas (320M pixels in all, over the 50M cap) is a 400 at once, before any frame is decoded.

usage: openai_vision_test.py MYRIAD_BINARY REPO_ROOT WORK_DIR
"""
import base64
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib

import openai

myriad, root, work = sys.argv[1:4]
KEY = "vision-key"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
from interop_checks import Checks  # noqa: E402

check = Checks()


def png(width, height, seed):
    """An RGB PNG of random pixels: signature, IHDR, one zlib IDAT (filter byte 0 per row), IEND."""
    r = random.Random(seed)
    raw = b"".join(b"\x00" + bytes(r.randrange(256) for _ in range(width * 3)) for _ in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def gif(width, height, frames, canvas=None):
    """A GIF89a: a 4-colour global table, each frame (palette indices, row-major, width x height) at the top left
    of a canvas (default its own size), LZW minimum code size 2 with a clear code before every two pixels, so every
    code is a 3-bit literal."""
    cw, ch = canvas or (width, height)
    out = b"GIF89a" + struct.pack("<HHBBB", cw, ch, 0x81, 0, 0) + bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])
    for px in frames:
        out += b"," + struct.pack("<HHHHB", 0, 0, width, height, 0) + b"\x02"
        acc, bits, data = 0, 0, bytearray()
        codes = []
        for i, p in enumerate(px):
            codes += ([4] if i % 2 == 0 else []) + [p]
        for c in codes + [5]:
            acc |= c << bits
            bits += 3
            while bits >= 8:
                data.append(acc & 255)
                acc >>= 8
                bits -= 8
        if bits:
            data.append(acc & 255)
        for at in range(0, len(data), 255):
            block = data[at:at + 255]
            out += bytes([len(block)]) + bytes(block)
        out += b"\x00"
    return out + b";"


def video_part(data):
    return {"type": "video_url", "video_url": {"url": data_uri(data, "image/gif")}}


def data_uri(data, media="image/png"):
    return f"data:{media};base64," + base64.b64encode(data).decode()


def image_part(data, media="image/png"):
    return {"type": "image_url", "image_url": {"url": data_uri(data, media)}}


def start_server(model_dir):
    proc = subprocess.Popen([myriad, "serve", "--model", model_dir, "--port", "0", "--api-key", KEY, "--max-batch",
                             "8", "--prefix-every", "64", "--max-images", "4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, MYRIAD_THREADS="2"))
    m = re.search(r"http://127\.0\.0\.1:(\d+)", proc.stdout.readline())
    if not m:
        print("FAIL: no listening line from myriad serve:", proc.stdout.read(), flush=True)
        proc.kill()
        sys.exit(1)
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    port = int(m.group(1))
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    break
        except Exception:
            pass
        time.sleep(0.05)
    return proc, port


def tokenize(port, messages):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", data=json.dumps({"messages": messages}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["tokens"]


# ---- the models ------------------------------------------------------------------------------------------------------
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
rng = random.Random(5)
words = "the a cat dog red blue square circle one two three is what colour how many left right top".split()
corpus = os.path.join(work, "corpus.txt")
with open(corpus, "w") as f:
    for _ in range(2000):
        f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + ".\n")
vlm, text_only = os.path.join(work, "tiny-vl"), os.path.join(work, "tiny")
subprocess.run([myriad, "tokenizer", "train", "--data", corpus, "--vocab", "300", "--out",
                os.path.join(vlm, "tokenizer")], check=True, stdout=subprocess.DEVNULL)
vocab = json.load(open(os.path.join(vlm, "tokenizer", "tokenizer.json")))["vocab_size"]
for name, out in (("tiny-vl.json", vlm), ("tiny.json", text_only)):
    config = json.load(open(os.path.join(root, "configs", name)))
    config["vocab_size"] = vocab
    path = os.path.join(work, name)
    json.dump(config, open(path, "w"), indent=1)
    subprocess.run([myriad, "init", "--config", path, "--out", out, "--seed", "3"], check=True,
                   stdout=subprocess.DEVNULL)
shutil.copytree(os.path.join(vlm, "tokenizer"), os.path.join(text_only, "tokenizer"), dirs_exist_ok=True)
square, wide, other = png(56, 56, 1), png(56, 28, 2), png(56, 56, 3)
image_path = os.path.join(work, "square.png")
open(image_path, "wb").write(square)

server, port = start_server(vlm)
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=60)
PLACEHOLDER = 11  # <|image|>, the config's media_placeholder_token_id


def ask(content, **kw):
    return client.chat.completions.create(model="tiny-vl", messages=[{"role": "user", "content": content}],
                                          max_tokens=8, temperature=0, **kw)


def runs(ids):
    """The lengths of the runs of image placeholders in a prompt."""
    out, n = [], 0
    for t in ids + [-1]:
        if t == PLACEHOLDER:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out


try:
    # ---- an image in a chat ------------------------------------------------------------------------------------------
    content = [image_part(square), {"type": "text", "text": "what colour is the square?"}]
    r = ask(content)
    check(isinstance(r.choices[0].message.content, str) and r.usage.completion_tokens > 0, "a chat with an image answers")
    text_ids = tokenize(port, [{"role": "user", "content": "what colour is the square?"}])
    ids = tokenize(port, [{"role": "user", "content": content}])
    check(runs(ids) == [4] and len(ids) == len(text_ids) + 4 and r.usage.prompt_tokens == len(ids),
          f"the prompt is the text plus one run of 4 placeholders (56 x 56 px: 4 x 4 patches, 2 x 2 merge): runs "
          f"{runs(ids)}, {len(ids)} tokens vs {len(text_ids)} of text, usage {r.usage.prompt_tokens}")
    two = [{"type": "text", "text": "compare"}, image_part(square), {"type": "text", "text": "and"}, image_part(wide)]
    check(runs(tokenize(port, [{"role": "user", "content": two}])) == [4, 2] and ask(two).usage.prompt_tokens > 0,
          "two images of different sizes in one message: runs of 4 and 2 placeholders where they stand")
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(content, stream=True) if c.choices)
    check(streamed == r.choices[0].message.content, "streaming gives the same reply (greedy)")

    # ---- prefix reuse by the image's content -------------------------------------------------------------------------
    long_text = " ".join(rng.choice(words) for _ in range(120))
    first = ask([image_part(square), {"type": "text", "text": long_text}])
    again = ask([image_part(square), {"type": "text", "text": long_text}])
    changed = ask([image_part(other), {"type": "text", "text": long_text}])
    cached = [x.usage.prompt_tokens_details.cached_tokens for x in (first, again, changed)]
    check(cached[1] >= 64 and cached[2] == 0 and again.choices[0].message.content == first.choices[0].message.content,
          f"the same image reuses its cached prefix, another image of the same size does not: cached {cached}")

    # ---- several requests' images at once ----------------------------------------------------------------------------
    pictures = [png(56, 56, 10 + i) if i % 2 else png(28 + 28 * i, 56, 10 + i) for i in range(4)]
    alone = [ask([image_part(p), {"type": "text", "text": "how many?"}]).choices[0].message.content for p in pictures]
    together = [None] * 4

    def send(i):
        together[i] = ask([image_part(pictures[i]), {"type": "text", "text": "how many?"}]).choices[0].message.content

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(together == alone, "four requests with different images sent at once answer what each answers alone")

    # ---- a video (an animated GIF) -----------------------------------------------------------------------------------
    vr = random.Random(7)
    frames = [[vr.randrange(4) for _ in range(56 * 56)] for _ in range(5)]
    clip = gif(56, 56, frames)
    video_content = [video_part(clip), {"type": "text", "text": "what moves?"}]
    vids = tokenize(port, [{"role": "user", "content": video_content}])
    answer = ask(video_content)
    check(runs(vids) == [8] and answer.usage.prompt_tokens == len(vids) and answer.usage.completion_tokens > 0,
          f"a video of 5 frames answers; its prompt has one run of 4 + 4 placeholders (chunks of 4 and 1 frames): "
          f"runs {runs(vids)}")
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(video_content, stream=True) if c.choices)
    check(streamed == answer.choices[0].message.content, "the video's reply streamed is the same (greedy)")
    changed_frames = frames[:4] + [[(p + 1) % 4 for p in frames[4]]]
    long_video = [video_part(clip), {"type": "text", "text": long_text}]
    ask(long_video)
    again = ask(long_video).usage.prompt_tokens_details.cached_tokens
    other_clip = ask([video_part(gif(56, 56, changed_frames)), {"type": "text", "text": long_text}])
    check(again >= 64 and other_clip.usage.prompt_tokens_details.cached_tokens == 0,
          f"the same video reuses its cached prefix ({again} tokens), one changed frame does not "
          f"({other_clip.usage.prompt_tokens_details.cached_tokens})")

    # ---- refusals ----------------------------------------------------------------------------------------------------
    def refused(content, param_part, words_in_message, client_=client, model="tiny-vl"):
        try:
            client_.chat.completions.create(model=model, messages=[{"role": "user", "content": content}],
                                            max_tokens=4)
            return False, "accepted"
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            message, param = body.get("message", str(e)), body.get("param") or ""
            return param_part in param and words_in_message in message, f"param {param!r}: {message}"

    truncated = square[: len(square) // 2]
    cases = [
        ([{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}], "not fetched", "remote URL"),
        ([image_part(square, "text/plain")], "not an image type", "a text/plain data: URI"),
        ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}}], "not valid base64", "bad base64"),
        ([image_part(truncated)], "corrupt or truncated", "a truncated PNG"),
        ([image_part(wide)] * 5, "more than 4 images", "5 images (--max-images 4)"),
        ([video_part(gif(1, 1, [[1]] * 20, canvas=(4000, 4000)))], "over the limit of 50000000 pixels",
         "a GIF of 20 frames on a 4000 x 4000 canvas (320M pixels over the 50M cap)"),
    ]
    for content_, words_, what in cases:
        t0 = time.time()
        ok, why = refused(content_, "messages[0].content[", words_)
        check(ok and time.time() - t0 < 5, f"{what}: 400 naming the part ({why}; {time.time() - t0:.2f} s)")
    check(ask("still there?").usage.completion_tokens > 0, "the server answers after the refusals")
    plain, plain_port = start_server(text_only)
    plain_client = openai.OpenAI(base_url=f"http://127.0.0.1:{plain_port}/v1", api_key=KEY, max_retries=0, timeout=60)
    try:
        ok, why = refused(content, "messages[0].content[0]", "no vision tower", plain_client, "tiny")
        check(ok, f"an image for a text-only model: 400 naming the missing vision tower ({why})")
    finally:
        plain.terminate()
        plain.wait(timeout=30)

    # ---- `myriad chat` with /image -----------------------------------------------------------------------------------
    out = subprocess.run([myriad, "chat", "--model", vlm, "--temperature", "0", "--max-tokens", "8"],
                         input=f"/image {image_path}\nwhat is this?\nand now?\n/quit\n".encode(), capture_output=True,
                         timeout=60, env=dict(os.environ, MYRIAD_THREADS="2"))
    turn1 = [{"role": "user", "content": [image_part(square), {"type": "text", "text": "what is this?"}]}]
    r1 = client.chat.completions.create(model="tiny-vl", messages=turn1, max_tokens=8,
                                        temperature=0).choices[0].message.content
    turn2 = turn1 + [{"role": "assistant", "content": r1}, {"role": "user", "content": "and now?"}]
    r2 = client.chat.completions.create(model="tiny-vl", messages=turn2, max_tokens=8,
                                        temperature=0).choices[0].message.content
    got = out.stdout.decode("utf-8", "replace")
    check(out.returncode == 0 and got == f"{r1}\n{r2}\n",
          f"myriad chat: /image then two turns reply as the server does ({got!r} vs {[r1, r2]!r}; "
          f"stderr {out.stderr.decode()[-300:]!r})")
    clip_path = os.path.join(work, "clip.gif")
    open(clip_path, "wb").write(clip)
    out = subprocess.run([myriad, "chat", "--model", vlm, "--temperature", "0", "--max-tokens", "8"],
                         input=f"/video {clip_path}\nwhat moves?\n/quit\n".encode(), capture_output=True,
                         timeout=60, env=dict(os.environ, MYRIAD_THREADS="2"))
    got = out.stdout.decode("utf-8", "replace")
    check(out.returncode == 0 and got == f"{answer.choices[0].message.content}\n",
          f"myriad chat: /video then a message replies as the server does to the video ({got!r})")
finally:
    server.terminate()
    server.wait(timeout=30)

check.finish("openai_vision")
