"""The Python bindings (python/myriad_module.cc, `import myriad`) against independent references: the tokenizer
against PyPI's `tokenizers` (which wrote it), the inference model's logits against the training model's forward
(`myriad logits`, another code path), greedy generation against the argmax of recomputed logits, and a training
step's loss against numpy's cross entropy of the inference logits. Run by ctest (label python) with PYTHONPATH set
to the built module; MYRIAD_BIN and MYRIAD_SOURCE_DIR name the CLI and the source tree."""
import json
import os
import subprocess

import numpy as np
import pytest

import myriad
import tokenizer_fixtures as fx

MYRIAD = os.environ["MYRIAD_BIN"]
SOURCE = os.environ["MYRIAD_SOURCE_DIR"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("bindings")
    lines = fx.training_lines(os.path.join(SOURCE, "..", "shared"))[:3000]
    ref = fx.build_llama3(str(d / "tok"), lines)
    cfg = json.load(open(os.path.join(SOURCE, "configs", "tiny.json")))
    cfg["vocab_size"] = 3072
    json.dump(cfg, open(d / "tiny.json", "w"))
    subprocess.run([MYRIAD, "init", "--config", str(d / "tiny.json"), "--out", str(d / "model")], check=True,
                   capture_output=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / "model" / f).write_bytes((d / "tok" / f).read_bytes())
    return d, ref


def test_tokenizer_matches_the_library_that_wrote_it(work):
    d, ref = work
    tok = myriad.Tokenizer(str(d / "tok"))
    assert tok.kind == "huggingface-bpe"
    for text in ["Hello, world!", "DON'T 12345 你好 🎉", "x<|im_end|>y", "  a\n\nb  "]:
        ids = tok.encode(text)
        assert ids.dtype == np.int32
        assert ids.tolist() == ref.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
    assert tok.eos_id == tok.id_of("<|end_of_text|>")


def test_logits_equal_the_training_forward(work):
    d, _ = work
    model = myriad.Model(str(d / "model"))
    tokens = np.array([5, 17, 300, 42, 1000, 7, 7, 2999, 64, 1])
    got = model.logits(tokens)
    assert got.shape == (len(tokens), 3072) and got.dtype == np.float32
    out = d / "logits.safetensors"
    subprocess.run([MYRIAD, "logits", "--model", str(d / "model"), "--tokens", ",".join(map(str, tokens)),
                    "--out", str(out)], check=True, capture_output=True)
    from safetensors.numpy import load_file
    want = load_file(str(out))["logits"]
    # Two code paths over the same weights (the serving decoders: absorbed MLA, KDA states; the training model):
    # equal up to f32 rounding of differently ordered sums. Logits are O(1): 2e-3 absolute is ~1e-3 relative.
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3)


def test_greedy_generation_is_the_argmax_of_recomputed_logits(work):
    d, _ = work
    model = myriad.Model(str(d / "model"))
    prompt = np.array([11, 22, 33, 44])
    new = model.generate(prompt, max_tokens=6, temperature=0, stop_at_eos=False)
    assert len(new) == 6
    seq = prompt.tolist()
    for t in new:
        assert int(np.argmax(model.logits(np.array(seq))[-1])) == int(t)
        seq.append(int(t))
    assert isinstance(model.generate_text("Hello", max_tokens=3), str)


def test_speculative_generation_keeps_the_greedy_tokens(work):
    d, _ = work
    model = myriad.Model(str(d / "model"))
    prompt = np.array([11, 22, 33, 44, 11, 22, 33, 44, 11, 22])
    plain = model.generate(prompt, max_tokens=12, temperature=0, stop_at_eos=False)
    # n-gram drafts, and the model drafting for itself (every draft accepted)
    for draft in ("ngram", model):
        got = model.generate(prompt, max_tokens=12, temperature=0, stop_at_eos=False, draft=draft, spec_tokens=3)
        np.testing.assert_array_equal(got, plain)
        s = model.last_speculation
        assert s["verifies"] > 0 and s["emitted"] == 11
    assert s["accepted"] == s["drafted"]
    with pytest.raises(ValueError, match="ngram"):
        model.generate(prompt, max_tokens=2, draft="bigram")


def test_training_step_loss_and_learning(work):
    d, _ = work
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3000, size=(2, 16))
    y = np.roll(x, -1, axis=1)
    y[:, -1] = -100  # ignored
    model = myriad.Model(str(d / "model"))
    ce = []
    for b in range(2):
        z = model.logits(x[b]).astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        ce.append(-np.mean([logp[t, y[b, t]] for t in range(15)]))
    trainer = myriad.Trainer(dir=str(d / "model"), lr=3e-3)
    first = trainer.step(x, y)
    # The loss before the first update is the cross entropy of the same weights (1e-4: f32 sums, two paths).
    assert first == pytest.approx(float(np.mean(ce)), rel=1e-4)
    for _ in range(29):
        last = trainer.step(x, y)
    assert trainer.steps == 30
    assert last < 0.6 * first, (first, last)
    # A run directory starts from its latest checkpoint, as --model does in the CLI: the same first loss.
    import shutil
    ck = d / "run" / "checkpoints" / "step-000003"
    if not ck.exists():
        shutil.copytree(d / "model", ck)
        (ck / "trainer_state.json").write_text("{}")
        (d / "run" / "checkpoints" / "latest").write_text("step-000003\n")
    assert myriad.Trainer(dir=str(d / "run"), lr=3e-3).step(x, y) == first


def test_errors_are_python_exceptions_with_myriads_message(work):
    d, _ = work
    with pytest.raises(RuntimeError, match="does not exist"):
        myriad.Tokenizer(str(d / "nowhere" / "tokenizer.json"))
    model = myriad.Model(str(d / "model"))
    with pytest.raises(ValueError, match="1-D"):
        model.logits(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="not a token id"):
        model.logits(np.array([-1]))
    with pytest.raises(ValueError, match="not both"):
        myriad.Trainer(dir=str(d / "model"), config=str(d / "tiny.json"))


def test_version_is_the_clis_and_the_repositorys():
    """The module and the CLI are stamped by the same build step (cmake/build_info.cmake); both start from the
    VERSION file's number, and the commit is the checkout's HEAD when built from git."""
    facts = json.loads(subprocess.run([MYRIAD, "version", "--json"], check=True, capture_output=True, text=True).stdout)
    assert myriad.__version__ == facts["version"]
    assert myriad.__commit__ == facts["commit"]
    base = open(os.path.join(SOURCE, "VERSION")).read().strip()
    assert facts["version"].startswith(base), (facts["version"], base)
    if os.path.isdir(os.path.join(SOURCE, ".git")):
        head = subprocess.run(["git", "-C", SOURCE, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        if head:
            assert facts["commit"].startswith(head), (facts["commit"], head)
