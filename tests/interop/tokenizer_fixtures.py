"""Tokenizers written by the reference libraries (PyPI's `tokenizers` and `tiktoken`), not by myriad, for the interop
test (tokenizer_interop.py) and the throughput benchmark (scripts/tokenizer_bench.py).

Each builder trains a small byte-level BPE with Hugging Face `tokenizers` on real text and saves it in a published
layout, returning (directory, reference) where reference encodes with the library:
  - llama3:   Split(Llama 3's pattern) + ByteLevel without regex, ignore_merges, special and non-special added
              tokens (one with lstrip/rstrip); merges saved as [left, right] pairs.
  - deepseek: DeepSeek-V3's pre-tokenizer chain (numbers, CJK, then its main pattern) + ByteLevel; merges rewritten
              as "left right" strings, as DeepSeek-V3's file has them.
  - gpt2:     ByteLevel with GPT-2's own pattern and a prefix space.
  - qwen:     Qwen 2's layout: an NFC normalizer, Split(its pattern, single digits) + ByteLevel, ChatML tokens.
  - behaviors: Split steps with every delimiter behavior, invert and Digits.
  - kimi:     Kimi's tiktoken format: tiktoken.model (ranks = the llama3 BPE's bytes then merges in order) and a
              tokenizer_config.json naming some of the 256 special ids; the reference is tiktoken.Encoding with
              Kimi's pattern and the specials numbered as Kimi's tokenizer code numbers them.
"""
import base64
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
DEEPSEEK = [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
            r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"""
            r"|\s*[\r\n]+|\s+(?!\S)|\s+"]
# Kimi's pat_str (tokenization_kimi.py), the alternatives joined with "|".
KIMI = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
KIMI_SPECIAL_NAMES = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>", "<|tool_calls_section_begin|>",
                      "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                      "<|tool_call_end|>"]

# Multilingual lines, so that the merges cover more than English.
MULTILINGUAL = [
    "你好世界，欢迎使用Kimi Linear！今天天气很好，我们去公园散步吧。",
    "こんにちは、世界。カタカナとひらがなを混ぜた文章です。",
    "안녕하세요, 세계! 한국어 문장도 있습니다.",
    "Привет, мир! Это русский текст с цифрами 2024 и знаками.",
    "Γειά σου Κόσμε! Ελληνικά γράμματα.",
    "مرحبا بالعالم، هذا نص عربي.",
    "नमस्ते दुनिया, यह हिंदी पाठ है।",
    "café naïve résumé Zürich Ærøskøbing Straße",
    "🎉🚀 emoji test 😀 👩‍💻 🇫🇷 ❤️",
    "def foo(x: int) -> bool:\n    return x > 0  # comment\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
]


def training_lines(shared_dir):
    path = os.path.join(shared_dir, "data", "tinyshakespeare.txt")
    lines = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()[:30000]
    else:  # the shared data is not there: a smaller built-in text
        lines = ["The quick brown fox jumps over the lazy dog. It's 12:30 and we're late!"] * 500
    return lines + MULTILINGUAL * 40


def _train(pre, lines, vocab, ignore_merges=False, specials=()):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=list(specials), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return tok


def _save(tok, d, eos=None, merges_as_strings=False):
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    if merges_as_strings:
        j = json.load(open(path, encoding="utf-8"))
        j["model"]["merges"] = [m if isinstance(m, str) else m[0] + " " + m[1] for m in j["model"]["merges"]]
        json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False)
        tok = Tokenizer.from_file(path)
    if eos:
        json.dump({"eos_token": eos}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    return tok


def build_llama3(out, lines):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = _train(pre, lines, 3000, ignore_merges=True,
                 specials=["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False)])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False)])
    return _save(tok, out, eos="<|end_of_text|>")


def build_deepseek(out, lines):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(p), behavior="isolated") for p in DEEPSEEK] +
                                  [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = _train(pre, lines, 2500, specials=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"])
    return _save(tok, out, eos="<｜end▁of▁sentence｜>", merges_as_strings=True)


def build_gpt2(out, lines):
    tok = _train(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), lines, 2000,
                 specials=["<|endoftext|>"])
    return _save(tok, out, eos="<|endoftext|>")


QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")


def build_qwen(out, lines):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return _save(tok, out, eos="<|im_end|>")


def build_behaviors(out, lines):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{P}"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"q"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"[xyz]+"), behavior="isolated", invert=True),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    return _save(_train(pre, lines, 1200), out)


def build_kimi(out, llama3_dir):
    """A tiktoken.model from the llama3 tokenizer's BPE: the 256 bytes, then each merge's bytes in merge order."""
    import tiktoken
    j = json.load(open(os.path.join(llama3_dir, "tokenizer.json"), encoding="utf-8"))
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    ranks = {bytes([b]): b for b in range(256)}
    for m in j["model"]["merges"]:
        left, right = m if isinstance(m, list) else m.split(" ")
        t = bytes(dec[c] for c in left + right)
        if t not in ranks:
            ranks[t] = len(ranks)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tiktoken.model"), "w") as f:
        for t, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(t).decode()} {r}\n")
    nb = len(ranks)
    decoder = {str(nb + i): {"content": name, "special": True} for i, name in enumerate(KIMI_SPECIAL_NAMES)}
    json.dump({"added_tokens_decoder": decoder, "bos_token": "[BOS]", "eos_token": "[EOS]",
               "tokenizer_class": "TikTokenTokenizer"}, open(os.path.join(out, "tokenizer_config.json"), "w"))
    specials = {decoder.get(str(i), {}).get("content", f"<|reserved_token_{i}|>"): i for i in range(nb, nb + 256)}
    return tiktoken.Encoding(name="kimi-test", pat_str=KIMI, mergeable_ranks=ranks, special_tokens=specials)
