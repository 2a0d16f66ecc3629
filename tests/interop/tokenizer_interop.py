#!/usr/bin/env python3
"""myriad's readers of published tokenizers against the reference libraries, id for id.

Usage: tokenizer_interop.py MYRIAD WORK_DIR SOURCE_DIR

For each tokenizer of tokenizer_fixtures.py (written by PyPI's `tokenizers` / `tiktoken`, never by myriad) and every
case of a multilingual corpus (ASCII, contractions in any case, numbers, CJK, Hangul, Cyrillic, Arabic, Devanagari and
combining marks, emoji with ZWJ and flags, code, every kind of whitespace including U+0085 and U+3000, special tokens
and fragments of them, and 400 seeded random strings over those scripts):
  - `myriad tokenizer encode` gives exactly the reference's ids, both with special tokens parsed (tiktoken's
    allowed_special="all"; Hugging Face with add_special_tokens=False) and as text (encode_ordinary;
    encode_special_tokens=True);
  - `myriad tokenizer decode` of the reference's ids gives the reference's decoding;
  - ill-formed UTF-8 and random bytes (which neither Python library can be given) round-trip byte for byte;
  - kinds myriad does not read are refused with one message naming the kind.
Exits non-zero on the first difference, printing the case.
"""
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile

import tokenizer_fixtures as fx

MYRIAD, WORK, SOURCE = sys.argv[1], sys.argv[2], sys.argv[3]

HANDWRITTEN = [
    "", "x", " ", "  ", "\n", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "I'll say don't, can't, we're, and they've. DON'T SHOUT, I'LL KNOW. She'S here.",
    "In 2024 there were 123456 events, or 3.14159 pi; 1,000,000 and 007.",
    "Hi, world!\n\nNext paragraph.\tTabbed.\r\nWindows line.\r\n", "end   ", "a  b\n\n\nc", "   leading spaces",
    "trailing newlines\n\n\n", "\t\t\tindent", " \n \n ", "x\u0085y\u00a0z\u3000w\u2028v\u2029u",
    "café naïve résumé Zürich", "cafe\u0301 (combining acute)",
    "A\u030a\u0327 \u1e9b\u0323 \u1100\u1161\u11a8 \u212b \u2126", "e\u0301\xff\u0301", "ǅungla ǈ Ǌ titlecase", "ſtraße KELVIN \u212a",
    "你好世界，欢迎使用Kimi Linear！", "こんにちは、世界", "안녕하세요", "Mixed 中文 and English 混合 text 123",
    "🎉🚀 emoji test 😀", "👩‍💻👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✔︎", "नमस्ते दुनिया", "مرحبا بالعالم", "Привет, МИР!",
    "def foo(x: int) -> bool:\n    return x > 0  # comment\n", "if (a && b || !c) { x[i] = y->z; }",
    "<html><body class=\"main\">Text &amp; more</body></html>", "https://example.com/path?q=1&r=2#frag",
    "<|im_end|>", "hello<|im_end|>world", "<|im_start|>user\nhi<|im_end|>", "<|im_en", "<|im_end",
    "a <mask> b", "a<mask>b", "x  <mask>  y", "<think>reasoning</think>", "[BOS]start[EOS]", "<|reserved_token_3000|>",
    "<|end_of_text|><|end_of_text|>", "<｜begin▁of▁sentence｜>Hello", "<|endoftext|>next document",
    "qqq xyz quiz puzzle 12345 a.b,c;d!", "''''''''", "'s's's 'S", "...!!!???", "$$$ 100% #1 @home",
    "a" * 300, " " * 200, "9" * 100, "中" * 150, "😀" * 70, "ab " * 100,
]

SCRIPTS = [
    (0x61, 0x7A), (0x41, 0x5A), (0x30, 0x39), (0x20, 0x2F), (0x3A, 0x40), (0x4E00, 0x4FFF), (0x3041, 0x3096),
    (0x30A1, 0x30FA), (0xAC00, 0xACFF), (0x0410, 0x044F), (0x0391, 0x03C9), (0x0621, 0x064A), (0x0905, 0x0939),
    (0x093E, 0x094C), (0x0300, 0x036F), (0x1F600, 0x1F64F), (0x1F300, 0x1F3FF), (0x00C0, 0x00FF),
]
SPECIALS = ["\n", "\r\n", "\t", "  ", "\u00a0", "\u3000", "\u0085", "\u200d", "\ufe0f", "'s", "'LL", "<|im_end|>",
            "<mask>", "<think>"]


def random_cases(n, seed=20261203):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.15:
                parts.append(rng.choice(SPECIALS))
            else:
                lo, hi = rng.choice(SCRIPTS)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
            if rng.random() < 0.4:
                parts.append(" ")
        out.append("".join(parts))
    return out


def run(args, input_bytes=None):
    r = subprocess.run([MYRIAD] + args, input=input_bytes, capture_output=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: myriad {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r.stdout


def myriad_encode(tok_path, texts, as_text):
    path = os.path.join(WORK, "cases.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    args = ["tokenizer", "encode", "--tokenizer", tok_path, "--jsonl", path] + (["--as-text"] if as_text else [])
    lines = run(args).decode().splitlines()
    # Empty texts give "[]" lines too: one line per case.
    return [json.loads(line) for line in lines]


def myriad_decode(tok_path, id_lists):
    path = os.path.join(WORK, "ids.jsonl")
    with open(path, "w") as f:
        for ids in id_lists:
            f.write(json.dumps(ids) + "\n")
    lines = run(["tokenizer", "decode", "--tokenizer", tok_path, "--jsonl", path]).decode().splitlines()
    return [bytes.fromhex(json.loads(line)["hex"]) for line in lines]


def compare(name, texts, got, want, what):
    assert len(got) == len(want), (name, what, len(got), len(want))
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    if bad:
        i = bad[0]
        sys.exit(f"FAIL {name} {what}: {len(bad)} of {len(texts)} cases differ; first {texts[i]!r}\n"
                 f"  myriad    {got[i]}\n  reference {want[i]}")
    print(f"ok {name} {what}: {len(texts)} cases identical")


def check_round_trip(name, tok_path, expect=lambda b: b):
    rng = random.Random(7)
    blob = (b"valid text \xff\xfe invalid \xc3( overlong \xc0\xaf surrogate \xed\xa0\x80 truncated \xe4\xb8"
            b" beyond \xf4\x90\x80\x80 end \xe2\x96\x81 " + bytes(rng.randrange(256) for _ in range(3000)))
    ids = run(["tokenizer", "encode", "--tokenizer", tok_path], input_bytes=blob).decode().strip()
    back = run(["tokenizer", "decode", "--tokenizer", tok_path, "--ids", ids])
    if back != expect(blob):
        sys.exit(f"FAIL {name}: {len(blob)} bytes with ill-formed UTF-8 did not round-trip ({len(back)} back)")
    print(f"ok {name}: {len(blob)} bytes of ill-formed UTF-8 and random bytes round-trip "
          f"({len(ids.split(','))} tokens)")


def check_hugging_face(name, d, ref, texts):
    tok_path = os.path.join(d, "tokenizer.json") if name == "deepseek" else d  # a file and a directory
    want = [ref.encode(t, add_special_tokens=False).ids for t in texts]
    compare(name, texts, myriad_encode(tok_path, texts, False), want, "encode")
    ref.encode_special_tokens = True
    want_text = [ref.encode(t, add_special_tokens=False).ids for t in texts]
    ref.encode_special_tokens = False
    compare(name, texts, myriad_encode(tok_path, texts, True), want_text, "encode, specials as text")
    got = [b.decode("utf-8", errors="replace") for b in myriad_decode(tok_path, want)]
    compare(name, texts, got, [ref.decode(ids, skip_special_tokens=False) for ids in want], "decode")
    # What the reference does to text: ByteLevel's add_prefix_space adds a space in front (gpt2); a Removed split
    # drops its matches ("q" in behaviors).
    # NFC composes what the random bytes spell as decomposed characters (qwen); ill-formed bytes stay, and block
    # composition across them as a lone surrogate escape does in Python.
    import unicodedata
    nfc = lambda b: unicodedata.normalize("NFC", b.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    expect = {"gpt2": lambda b: b" " + b, "behaviors": lambda b: b.replace(b"q", b""), "qwen": nfc}.get(name, lambda b: b)
    check_round_trip(name, tok_path, expect)


def check_refusals(d):
    base = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    cases = [
        ("unigram", lambda j: j["model"].update(type="Unigram"), "Unigram"),
        ("normalizer", lambda j: j.update(normalizer={"type": "NFKC"}), "normalizer"),
        ("metaspace", lambda j: j.update(pre_tokenizer={"type": "Metaspace", "replacement": "▁"}), "Metaspace"),
        ("merge", lambda j: j["model"]["merges"].append(["zzqq", "qqzz"]), "not in the vocabulary"),
        ("single_word", lambda j: j["added_tokens"][0].update(single_word=True), "single_word"),
    ]
    for tag, mutate, needle in cases:
        j = json.loads(json.dumps(base))
        mutate(j)
        bad = os.path.join(WORK, f"bad_{tag}")
        os.makedirs(bad, exist_ok=True)
        json.dump(j, open(os.path.join(bad, "tokenizer.json"), "w"))
        r = subprocess.run([MYRIAD, "tokenizer", "encode", "--tokenizer", bad, "--text", "x"], capture_output=True)
        err = r.stderr.decode()
        if r.returncode == 0 or needle not in err or len(err.strip().splitlines()) != 1:
            sys.exit(f"FAIL refusal {tag}: exit {r.returncode}, stderr {err!r} (expected one line naming {needle!r})")
        print(f"ok refused {tag}: {err.strip()}")
    bad = os.path.join(WORK, "bad_tiktoken")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(bad, "tiktoken.model"), "w") as f:
        f.write("IQ== 0\nnot-base64! 1\n")
    r = subprocess.run([MYRIAD, "tokenizer", "encode", "--tokenizer", bad, "--text", "x"], capture_output=True)
    if r.returncode == 0 or "tiktoken.model:2" not in r.stderr.decode():
        sys.exit(f"FAIL refusal of a bad tiktoken.model line: {r.stderr.decode()!r}")
    empty = os.path.join(WORK, "empty_dir")
    os.makedirs(empty, exist_ok=True)
    r = subprocess.run([MYRIAD, "tokenizer", "encode", "--tokenizer", empty, "--text", "x"], capture_output=True)
    if r.returncode == 0 or "looked for" not in r.stderr.decode() or "--tokenizer" not in r.stderr.decode():
        sys.exit(f"FAIL: a directory without a tokenizer: {r.stderr.decode()!r}")
    print("ok refused a bad tiktoken.model line and an empty directory")


def check_models_use_their_tokenizer(llama3_ref, kimi_enc):
    """A model whose tokenizer files lie beside config.json (the published layout) generates with them; --tokenizer
    gives another one. The prompt token count generate reports is the reference's."""
    import re
    import shutil
    cfg = json.load(open(os.path.join(SOURCE, "configs", "tiny.json")))
    cfg["vocab_size"] = 3328  # covers both tokenizers (llama3: ~3000, kimi: ~3000 + 256 specials)
    cfg_path = os.path.join(WORK, "foreign_model.json")
    json.dump(cfg, open(cfg_path, "w"))
    model = os.path.join(WORK, "foreign_model")
    shutil.rmtree(model, ignore_errors=True)
    run(["init", "--config", cfg_path, "--out", model])
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(WORK, "llama3", f), model)
    prompt = "Mixed 中文 and English text, DON'T stop 🎉"
    for extra, want in (([], len(llama3_ref.encode(prompt, add_special_tokens=False).ids)),
                        (["--tokenizer", os.path.join(WORK, "kimi")], len(kimi_enc.encode(prompt, allowed_special="all")))):
        r = subprocess.run([MYRIAD, "generate", "--model", model, "--prompt", prompt, "--max-tokens", "3"] + extra,
                           capture_output=True)
        m = re.search(rb"\[(\d+) prompt tokens", r.stdout + r.stderr)
        if r.returncode != 0 or not m or int(m.group(1)) != want:
            sys.exit(f"FAIL generate {extra}: exit {r.returncode}, {(r.stdout + r.stderr)[-300:]!r}, want {want} prompt tokens")
        print(f"ok generate with {'--tokenizer kimi' if extra else 'the tokenizer beside config.json'}: {want} prompt tokens")


@contextlib.contextmanager
def served(model_dir):
    """`myriad serve --model model_dir` on a free port; yields post(path, body) -> (status, json)."""
    import http.client
    import re
    import time
    server = subprocess.Popen([MYRIAD, "serve", "--model", model_dir, "--port", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        m = re.search(r":(\d+) ", server.stdout.readline())
        if not m:
            sys.exit("FAIL: no listening line from myriad serve")
        port = int(m.group(1))

        def post(path, body):
            for _ in range(100):  # the model loads in the background: 503 until then
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                if r.status != 503:
                    return r.status, json.loads(data)
                time.sleep(0.1)
            sys.exit("FAIL: the server did not load the model")

        yield post
    finally:
        server.terminate()
        server.wait(timeout=30)


def check_served_in_the_models_chat_format(kimi_enc):
    """`myriad serve` of a model shipping Kimi's tiktoken tokenizer: /tokenize of a conversation gives tiktoken's ids
    of Kimi K2's rendered stream (its default system turn, <|im_*|> markers); with tools, calls and results, the ids
    of Kimi-K2-Instruct's chat template rendered by jinja2 for the same request (the expected text below); a chat
    completion answers, with tools too, and tool_choice naming a function starts the reply inside that call."""
    import shutil
    model = os.path.join(WORK, "foreign_model")
    kimi_model = os.path.join(WORK, "kimi_model")
    shutil.rmtree(kimi_model, ignore_errors=True)
    shutil.copytree(model, kimi_model, ignore=shutil.ignore_patterns("tokenizer.json", "tokenizer_config.json"))
    for f in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(WORK, "kimi", f), kimi_model)
    with served(kimi_model) as post:
        messages = [{"role": "user", "content": "What's the weather like in Beijing today?"}]
        status, j = post("/tokenize", {"messages": messages})
        rendered = ("<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>\n"
                    "<|im_user|>user<|im_middle|>What's the weather like in Beijing today?<|im_end|>"
                    "<|im_assistant|>assistant<|im_middle|>")
        want = kimi_enc.encode(rendered, allowed_special="all")
        if status != 200 or j.get("tokens") != want:
            sys.exit(f"FAIL /tokenize in the kimi format: {status} {j}\n  want {want}")
        print(f"ok /tokenize of a conversation in the kimi chat format: {len(want)} tokens, tiktoken's ids")
        status, j = post("/v1/chat/completions", {"messages": messages, "max_tokens": 4})
        if status != 200 or j["choices"][0]["finish_reason"] not in ("length", "stop"):
            sys.exit(f"FAIL chat completion in the kimi format: {status} {j}")
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                   "parameters": {"type": "object", "properties": {"city": {
                                                       "type": "string"}}, "required": ["city"]}}}]
        conv = [{"role": "user", "content": "Weather in Tokyo and Paris? 東京"},
                {"role": "assistant", "content": "Let me check.", "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": json.dumps({"city": "Tokyo"})}},
                    {"id": "b", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": json.dumps({"city": "Paris"})}}]},
                {"role": "tool", "tool_call_id": "a", "content": "sunny"},
                {"role": "tool", "tool_call_id": "b", "content": "rain"},
                {"role": "user", "content": "And Rome?"}]
        # Kimi-K2-Instruct's chat_template rendered by jinja2 (transformers' settings) for conv and tools
        rendered = (
            '<|im_system|>tool_declare<|im_middle|>[{"type": "function", "function": {"name": "get_weather", '
            '"description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": '
            '"string"}}, "required": ["city"]}}}]<|im_end|><|im_system|>system<|im_middle|>You are Kimi, an AI '
            'assistant created by Moonshot AI.<|im_end|>\n<|im_user|>user<|im_middle|>Weather in Tokyo and Paris? '
            '東京<|im_end|><|im_assistant|>assistant<|im_middle|>Let me check.<|tool_calls_section_begin|>'
            '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Tokyo"}<|tool_call_end|>'
            '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
            '<|tool_calls_section_end|><|im_end|><|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n'
            'sunny<|im_end|><|im_system|>tool<|im_middle|>## Return of functions.get_weather:1\nrain<|im_end|>'
            '<|im_user|>user<|im_middle|>And Rome?<|im_end|><|im_assistant|>assistant<|im_middle|>')
        want = kimi_enc.encode(rendered, allowed_special="all")
        status, j = post("/tokenize", {"messages": conv, "tools": tools})
        if status != 200 or j.get("tokens") != want:
            sys.exit(f"FAIL /tokenize with tools in the kimi format: {status} {j}\n  want {want}")
        print(f"ok /tokenize of tools, calls and results in the kimi chat format: {len(want)} tokens, tiktoken's ids")
        status, j = post("/v1/chat/completions", {"messages": conv, "tools": tools, "max_tokens": 6})
        if status != 200 or j["choices"][0]["finish_reason"] not in ("length", "stop", "tool_calls"):
            sys.exit(f"FAIL tools in the kimi format: {status} {j}")
        choice = {"type": "function", "function": {"name": "get_weather"}}
        status, j = post("/v1/chat/completions", {"messages": conv, "tools": tools, "tool_choice": choice,
                                                  "max_tokens": 4})
        # the forced start of the call (the conversation's third call: index 2) follows the generation prompt
        forced = kimi_enc.encode("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:2"
                                 "<|tool_call_argument_begin|>", allowed_special="all")
        if status != 200 or j.get("usage", {}).get("prompt_tokens") != len(want) + len(forced):
            sys.exit(f"FAIL tool_choice in the kimi format: {status} {j}, want {len(want) + len(forced)} prompt tokens")
        print("ok chat completions with tools and a named tool_choice in the kimi format")


def check_served_in_k3s_format(kimi_enc):
    """The same model with K3's message tags named among the tiktoken specials: /tokenize of a conversation with
    tools, reasoning, calls (a string and an object of arguments) and results answered out of order gives tiktoken's
    ids of K3's renderer output for the same request (the Jinja port llama.cpp bundles, models/templates/Kimi-K3.jinja,
    rendered by jinja2: the expected text below); a chat completion with tools answers."""
    import shutil
    import tiktoken
    kimi_model = os.path.join(WORK, "kimi_model")
    k3_model = os.path.join(WORK, "k3_model")
    shutil.rmtree(k3_model, ignore_errors=True)
    shutil.copytree(kimi_model, k3_model)
    cfg_path = os.path.join(k3_model, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    first = min(int(k) for k in cfg["added_tokens_decoder"])
    for i, name in enumerate(["<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>"]):
        cfg["added_tokens_decoder"][str(first + 100 + i)] = {"content": name, "special": True}
    json.dump(cfg, open(cfg_path, "w"))
    specials = {name: i for name, i in kimi_enc._special_tokens.items() if not (first + 100 <= i < first + 104)}
    specials.update({name: first + 100 + i for i, name in enumerate(["<|open|>", "<|sep|>", "<|close|>",
                                                                    "<|end_of_msg|>"])})
    k3_enc = tiktoken.Encoding(name="k3-test", pat_str=kimi_enc._pat_str, mergeable_ranks=kimi_enc._mergeable_ranks,
                               special_tokens=specials)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}, "Days": {"type": "integer"}},
                                                   "required": ["city"]}}}]
    conv = [{"role": "user", "content": "Weather in Tokyo & \"Paris\"?"},
            {"role": "assistant", "content": "Let me check.", "reasoning_content": "The user wants weather.",
             "tool_calls": [
                 {"id": "a", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": json.dumps({"city": "Tokyo"})}},
                 {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": {
                     "city": "Paris", "days": 2, "metric": True, "tags": ["a", "b"]}}}]},
            {"role": "tool", "tool_call_id": "b", "content": "rain"},
            {"role": "tool", "tool_call_id": "a", "content": "sunny"},
            {"role": "assistant", "content": "Tokyo sunny, Paris rain."},
            {"role": "user", "content": "Thanks"}]
    effort = ('<|open|>message role="system" type="thinking-effort"<|sep|>`thinking_effort` guides on how much to '
              'think in your thinking channel (not including the response channel), supported values include `low`, '
              '`medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort=max`.<|close|>message'
              '<|sep|><|end_of_msg|>')
    rendered = (
        '<|open|>message role="system" type="tool-declare"<|sep|># Tools\nHere are the available tools, described in '
        'JSONSchema.\n\n```json\n[{"function":{"description":"Weather of a city","name":"get_weather","parameters":'
        '{"properties":{"city":{"type":"string"},"Days":{"type":"integer"}},"required":["city"],"type":"object"}},'
        '"type":"function"}]\n```<|close|>message<|sep|><|end_of_msg|>' + effort +
        '<|open|>message role="user"<|sep|>Weather in Tokyo & "Paris"?<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>The user wants weather.<|close|>think<|sep|>'
        '<|open|>response<|sep|>Let me check.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call '
        'tool="get_weather" index="1"<|sep|><|open|>json type="object"<|sep|>{"city": "Tokyo"}<|close|>json<|sep|>'
        '<|close|>call<|sep|><|open|>call tool="get_weather" index="2"<|sep|><|open|>argument key="city" '
        'type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>2'
        '<|close|>argument<|sep|><|open|>argument key="metric" type="boolean"<|sep|>true<|close|>argument<|sep|>'
        '<|open|>argument key="tags" type="array"<|sep|>["a", "b"]<|close|>argument<|sep|><|close|>call<|sep|>'
        '<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|><|open|>message role="tool" tool="get_weather" '
        'index="1"<|sep|>sunny<|close|>message<|sep|><|end_of_msg|><|open|>message role="tool" tool="get_weather" '
        'index="2"<|sep|>rain<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>'
        'think<|sep|><|close|>think<|sep|><|open|>response<|sep|>Tokyo sunny, Paris rain.<|close|>response<|sep|>'
        '<|close|>message<|sep|><|end_of_msg|><|open|>message role="user"<|sep|>Thanks<|close|>message<|sep|>'
        '<|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>think<|sep|>')
    want = k3_enc.encode(rendered, allowed_special="all")
    with served(k3_model) as post:
        status, j = post("/tokenize", {"messages": conv, "tools": tools})
        if status != 200 or j.get("tokens") != want:
            sys.exit(f"FAIL /tokenize in K3's format: {status} {j}\n  want {want}")
        print(f"ok /tokenize of tools, reasoning, calls and results in K3's chat format: {len(want)} tokens, "
              "tiktoken's ids")
        status, j = post("/v1/chat/completions", {"messages": conv, "tools": tools, "max_tokens": 6})
        if status != 200 or j["choices"][0]["finish_reason"] not in ("length", "stop", "tool_calls"):
            sys.exit(f"FAIL a chat completion in K3's format: {status} {j}")
        # tool_choice required: K3's system message before the generation prompt (the prompt grows by exactly it)
        choice_msg = ('<|open|>message role="system" type="tool-choice"<|sep|>The system is invoked with '
                      '`tool_choice=required`.\nYou MUST call tools in the next message.<|close|>message<|sep|>'
                      '<|end_of_msg|>')
        status, j = post("/v1/chat/completions", {"messages": conv, "tools": tools, "tool_choice": "required",
                                                  "max_tokens": 2})
        if status != 200 or j["usage"]["prompt_tokens"] != len(want) + len(k3_enc.encode(choice_msg,
                                                                                            allowed_special="all")):
            sys.exit(f"FAIL tool_choice required in K3's format: {status} {j}")
        status, j = post("/v1/chat/completions", {"messages": conv, "tools": tools,
                                                  "tool_choice": {"type": "function", "function": {"name": "x"}}})
        if status != 400 or "tool_choice" not in json.dumps(j):
            sys.exit(f"FAIL a named tool_choice in K3's format: {status} {j}")
        print("ok chat completions with tools in K3's format; tool_choice required renders K3's system message, a "
              "named one is a 400")


def served_with_added_tokens(name, fixture, added, special):
    """The served test model with a copy of a fixture's tokenizer.json to which `added` tokens were added (special
    or not, as the published tokenizer has them); returns (model dir, the reference Tokenizer)."""
    import shutil
    from tokenizers import AddedToken, Tokenizer
    ref = Tokenizer.from_file(os.path.join(WORK, fixture, "tokenizer.json"))
    tokens = [AddedToken(t, special=special, normalized=False) for t in added]
    ref.add_special_tokens(tokens) if special else ref.add_tokens(tokens)
    model = os.path.join(WORK, name + "_model")
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(os.path.join(WORK, "foreign_model"), model,
                    ignore=shutil.ignore_patterns("tokenizer.json", "tokenizer_config.json"))
    ref.save(os.path.join(model, "tokenizer.json"))
    shutil.copy(os.path.join(WORK, fixture, "tokenizer_config.json"), model)
    return model, ref


def check_tool_calls_served(name, model, ref, conv, tools, rendered, forced):
    """/tokenize of conv (and tools) gives the reference's ids of the template's text; a chat completion with tools
    answers; tool_choice naming get_weather appends `forced` (the call's start, the reference's ids) to the prompt."""
    want = ref.encode(rendered, add_special_tokens=False).ids
    with served(model) as post:
        status, j = post("/tokenize", {"messages": conv, "tools": tools} if tools else {"messages": conv})
        if status != 200 or j.get("tokens") != want:
            got = j.get("tokens", [])
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            sys.exit(f"FAIL /tokenize in the {name} format: {status}, first difference at token {at}: "
                     f"{ref.decode(got[at:at + 8], skip_special_tokens=False)!r} vs "
                     f"{ref.decode(want[at:at + 8], skip_special_tokens=False)!r}")
        print(f"ok /tokenize of {'tools, ' if tools else ''}calls and results in the {name} chat format: {len(want)} "
              "tokens, the tokenizers library's ids of the template's text")
        tools = tools or [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        status, j = post("/v1/chat/completions", {"messages": conv, "tools": tools, "max_tokens": 6})
        if status != 200 or j["choices"][0]["finish_reason"] not in ("length", "stop", "tool_calls"):
            sys.exit(f"FAIL tools in the {name} format: {status} {j}")
        status, j = post("/tokenize", {"messages": conv, "tools": tools})
        n = len(j["tokens"]) + len(ref.encode(forced, add_special_tokens=False).ids)
        status, j = post("/v1/chat/completions", {"messages": conv, "tools": tools, "max_tokens": 2, "tool_choice": {
            "type": "function", "function": {"name": "get_weather"}}})
        if status != 200 or j["usage"]["prompt_tokens"] != n:
            sys.exit(f"FAIL a named tool_choice in the {name} format: {status} {j}, want {n} prompt tokens")
        print(f"ok chat completions with tools and a named tool_choice in the {name} chat format")


def check_served_in_deepseek_and_chatml_formats():
    """DeepSeek-V3's and Qwen's (ChatML) tool calls through `myriad serve`: the expected texts are DeepSeek-V3-0324's
    chat template and Qwen2.5-Instruct's (Qwen3's gives the same here) rendered by jinja2 with transformers' settings
    for the same requests, encoded by the tokenizers library with the tokens those models add (DeepSeek's special,
    Qwen's <tool_call> family not special, as their tokenizer.json files have them)."""
    def call(name, args):
        return {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "Weather in Paris? 東京"},
            {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris"}),
                                                                call("add", {"a": 1, "b": 2})]},
            {"role": "tool", "content": "18C"}, {"role": "tool", "content": "3"},
            {"role": "assistant", "content": "Done."}, {"role": "user", "content": "U2"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [call("f", {})]},
            {"role": "tool", "content": "ok"}]
    ds_added = ["<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
                "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"]
    model, ref = served_with_added_tokens("deepseek", "deepseek", ds_added, special=True)
    rendered = (
        "<｜begin▁of▁sentence｜>S<｜User｜>Weather in Paris? 東京<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
        "function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>"
        "function<｜tool▁sep｜>add\n```json\n{\"a\": 1, \"b\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>18C<｜tool▁output▁end｜>\n"
        "<｜tool▁output▁begin｜>3<｜tool▁output▁end｜><｜tool▁outputs▁end｜>Done.<｜end▁of▁sentence｜><｜User｜>U2"
        "<｜Assistant｜>Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>ok"
        "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>")
    check_tool_calls_served("deepseek-v3", model, ref, conv, None, rendered,
                            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n")

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    model, ref = served_with_added_tokens("qwen", "qwen", ["<tool_call>", "</tool_call>", "<tool_response>",
                                                           "</tool_response>"], special=False)
    rendered = (
        "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": '
        '"object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n</tools>\n\nFor each '
        "function call, return a json object with function name and arguments within <tool_call></tool_call> XML "
        'tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather in Paris? 東京<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "add", '
        '"arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n'
        "</tool_response>\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>\n"
        "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\nLet me check.\n<tool_call>\n"
        '{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nok\n'
        "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    check_tool_calls_served("chatml", model, ref, conv, tools, rendered,
                            '<tool_call>\n{"name": "get_weather", "arguments": ')


def main():
    os.makedirs(WORK, exist_ok=True)
    lines = fx.training_lines(os.path.join(SOURCE, "..", "shared"))
    texts = HANDWRITTEN + fx.MULTILINGUAL + random_cases(400)
    built = {
        "llama3": fx.build_llama3(os.path.join(WORK, "llama3"), lines),
        "deepseek": fx.build_deepseek(os.path.join(WORK, "deepseek"), lines),
        "gpt2": fx.build_gpt2(os.path.join(WORK, "gpt2"), lines),
        "qwen": fx.build_qwen(os.path.join(WORK, "qwen"), lines),
        "behaviors": fx.build_behaviors(os.path.join(WORK, "behaviors"), lines),
    }
    for name, ref in built.items():
        check_hugging_face(name, os.path.join(WORK, name), ref, texts)

    kimi_dir = os.path.join(WORK, "kimi")
    enc = fx.build_kimi(kimi_dir, os.path.join(WORK, "llama3"))
    kimi_texts = texts + ["[BOS]<|im_user|>user<|im_middle|>hi[EOT]<|im_assistant|>", "<|reserved_token_9|>"]
    want = [enc.encode(t, allowed_special="all") for t in kimi_texts]
    compare("kimi", kimi_texts, myriad_encode(kimi_dir, kimi_texts, False), want, "encode")
    compare("kimi", kimi_texts, myriad_encode(kimi_dir, kimi_texts, True),
            [enc.encode_ordinary(t) for t in kimi_texts], "encode, specials as text")
    compare("kimi", kimi_texts, myriad_decode(kimi_dir, want), [enc.decode_bytes(ids) for ids in want], "decode")
    check_round_trip("kimi", kimi_dir)
    check_refusals(os.path.join(WORK, "llama3"))
    check_models_use_their_tokenizer(built["llama3"], enc)
    check_served_in_the_models_chat_format(enc)
    check_served_in_k3s_format(enc)
    check_served_in_deepseek_and_chatml_formats()
    print("tokenizer interop: all identical")


if __name__ == "__main__":
    main()
