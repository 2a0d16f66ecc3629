#!/usr/bin/env python3
"""Interop of myriad's safetensors I/O with Python's safetensors and torch, both directions.

usage: safetensors_interop.py MYRIAD_BINARY WORK_DIR   (ctest runs it with build/pyenv/bin/python)

1. Python writes files (safetensors.torch.save_file, safetensors.numpy.save_file, and a Hugging Face-style
   sharded checkpoint directory) holding F32 BF16 F16 I64 I32 U8 tensors, shapes [] and [2, 0], metadata.
   `myriad inspect --json` must list exactly what Python wrote; `myriad convert` copies them; the copies are
   loaded back with safetensors (torch and numpy) and with a header parser + torch.frombuffer written here, and
   must be bit-exact.
2. `myriad convert --dtype bf16|f16` of an F32 file must equal torch's .to(torch.bfloat16) / .to(torch.float16)
   bit for bit (round to nearest even), over random bit patterns, exact ties, subnormals, overflow and
   infinities. F16 NaNs match bit for bit too (sign | 0x7E00); BF16 NaNs must stay NaN, but their bit patterns
   are not compared (torch 1.13 itself gives 0xFFFF vectorised and 0x7FC0 scalar).
   Also BF16/F16 -> F32 and F16 -> BF16, and integers left unchanged.
3. A bad file makes `myriad inspect` (and `convert`) exit non-zero with exactly one error line naming the file.

Prints every check; exits 1 on any mismatch.
"""

import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import load_file as np_load
from safetensors.numpy import save_file as np_save
from safetensors.torch import load_file as torch_load
from safetensors.torch import save_file as torch_save

from interop_checks import Checks

DTYPE_NAMES = {
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.uint8: "U8",
}
NP_DTYPE_NAMES = {np.float32: "F32", np.float16: "F16", np.int64: "I64", np.int32: "I32", np.uint8: "U8"}
FROM_NAME = {v: k for k, v in DTYPE_NAMES.items()}
# Same-size integer views, so that comparisons are bit for bit (NaN == NaN, -0.0 != 0.0).
INT_VIEW = {
    torch.float32: torch.int32,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
    torch.int64: torch.int64,
    torch.int32: torch.int32,
    torch.uint8: torch.uint8,
}

check = Checks()


def run(*args):
    env = dict(os.environ, MYRIAD_THREADS="2")
    return subprocess.run([MYRIAD, *args], capture_output=True, text=True, env=env)


def run_ok(*args):
    r = run(*args)
    if not check(r.returncode == 0, "myriad " + " ".join(args) + " exits 0"):
        print(r.stdout + r.stderr)
    return r


def bits(t):
    return t.contiguous().view(INT_VIEW[t.dtype])


def same_bits(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(bits(a), bits(b))


def read_with_torch(path):
    """An independent reader: parse the header with json, view the bytes with torch.frombuffer."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = bytearray(raw[8 + n :])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dtype = FROM_NAME[e["dtype"]]
        if end > begin:
            t = torch.frombuffer(data, dtype=dtype, count=(end - begin) // torch.empty(0, dtype=dtype).element_size(),
                                 offset=begin)
        else:
            t = torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"]).clone()
    return out, header.get("__metadata__", {}), raw[8 + n :]


def check_inspect(path, expected, metadata, label, sharded_files=None):
    """`myriad inspect --json PATH` lists exactly `expected` (name -> (dtype name, shape, bytes))."""
    r = run_ok("inspect", "--json", path)
    if r.returncode != 0:
        return
    try:
        listing = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        check(False, f"{label}: inspect --json prints JSON ({e})")
        return
    got = {t["name"]: (t["dtype"], t["shape"], t["bytes"]) for t in listing["tensors"]}
    check(len(listing["tensors"]) == len(got), f"{label}: inspect lists each tensor once")
    for name, want in sorted(expected.items()):
        if not check(got.get(name) == want, f"{label}: inspect lists {name} as {want}"):
            print("      got", got.get(name))
    check(set(got) == set(expected), f"{label}: inspect lists no other tensors")
    params = sum(int(np.prod(s)) if s else 1 for _, s, _ in expected.values())
    nbytes = sum(b for _, _, b in expected.values())
    totals = listing["totals"]
    check(totals == {"tensors": len(expected), "parameters": params, "bytes": nbytes},
          f"{label}: inspect totals {totals} == {len(expected)} tensors, {params} parameters, {nbytes} bytes")
    check(listing["metadata"] == metadata, f"{label}: inspect metadata {listing['metadata']} == {metadata}")
    if sharded_files is not None:
        files = {t["name"]: t.get("file") for t in listing["tensors"]}
        check(listing["sharded"] and files == sharded_files, f"{label}: inspect names each tensor's shard")
    # The table form lists every name too.
    table = run_ok("inspect", path).stdout
    check(all(name in table for name in expected) and f"{len(expected)} tensors" in table,
          f"{label}: inspect table lists every tensor and the count")


def expected_from_torch(tensors):
    return {n: (DTYPE_NAMES[t.dtype], list(t.shape), t.numel() * t.element_size()) for n, t in tensors.items()}


def part1_torch_written():
    print("\n== 1a. torch-written file -> myriad inspect / convert -> safetensors, torch")
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 3.4028234663852886e38, 1e-45, 1.17e-38])
    tensors = {
        "model.embed.weight": torch.randn(7, 5, generator=g).to(torch.bfloat16),
        "model.layers.0.wq": torch.randn(3, 5, generator=g),
        "model.layers.0.norm": torch.randn(6, generator=g).to(torch.float16),
        "model.layers.0.special": special,
        "positions": torch.tensor([[0, -1, 2**62], [-(2**63), 5, 2**63 - 1]], dtype=torch.int64),
        "ids": torch.tensor([1, -2, 2**31 - 1, -(2**31), 0], dtype=torch.int32),
        "bytes": torch.arange(0, 250, 25, dtype=torch.uint8),
        "scalar_f32": torch.tensor(2.5),
        "scalar_i64": torch.tensor(-7, dtype=torch.int64),
        "empty_bf16": torch.zeros(2, 0, dtype=torch.bfloat16),
        "empty_f16": torch.zeros(0, dtype=torch.float16),
        "scalar_bf16": torch.tensor(-1.5).to(torch.bfloat16),
    }
    metadata = {"format": "pt", "origin": "safetensors_interop.py", "unicode": "héllo wörld"}
    src = os.path.join(WORK, "torch_written.safetensors")
    torch_save(tensors, src, metadata=metadata)

    check_inspect(src, expected_from_torch(tensors), metadata, "torch file")

    dst = os.path.join(WORK, "torch_written.copy.safetensors")
    run_ok("convert", "--in", src, "--out", dst)
    if not os.path.exists(dst):
        check(False, "convert wrote " + dst)
        return
    loaded = torch_load(dst)
    check(set(loaded) == set(tensors), "copy holds the same tensor names (safetensors.torch)")
    for name, t in tensors.items():
        check(name in loaded and same_bits(loaded[name], t),
              f"copy: {name} {DTYPE_NAMES[t.dtype]} {list(t.shape)} bit-exact (safetensors.torch)")
    mine, meta, data = read_with_torch(dst)
    for name, t in tensors.items():
        check(name in mine and same_bits(mine[name], t), f"copy: {name} bit-exact (json header + torch.frombuffer)")
    check(meta == metadata, "copy keeps the metadata")
    _, _, src_data = read_with_torch(src)
    check(data == src_data, "copy's data section is byte-identical to the original's (same order, same bytes)")
    with open(dst, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    check(n % 8 == 0, f"copy's header length {n} is a multiple of 8 (padded like the reference writer)")


def part1_numpy_written():
    print("\n== 1b. numpy-written file -> myriad convert -> safetensors.numpy")
    rng = np.random.default_rng(1)
    arrays = {
        "f32": rng.standard_normal((4, 3)).astype(np.float32),
        "f16": rng.standard_normal((5,)).astype(np.float16),
        "i64": rng.integers(-(2**62), 2**62, size=(2, 2), dtype=np.int64),
        "i32": rng.integers(-(2**31), 2**31 - 1, size=(3,), dtype=np.int32),
        "u8": rng.integers(0, 256, size=(2, 3, 2), dtype=np.uint8),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((2, 0), dtype=np.float32),
    }
    metadata = {"writer": "safetensors.numpy"}
    src = os.path.join(WORK, "numpy_written.safetensors")
    np_save(arrays, src, metadata=metadata)
    expected = {n: (NP_DTYPE_NAMES[a.dtype.type], list(a.shape), a.nbytes) for n, a in arrays.items()}
    check_inspect(src, expected, metadata, "numpy file")

    dst = os.path.join(WORK, "numpy_written.copy.safetensors")
    run_ok("convert", "--in", src, "--out", dst)
    if not os.path.exists(dst):
        return
    loaded = np_load(dst)
    for name, a in arrays.items():
        b = loaded.get(name)
        check(b is not None and b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes(),
              f"copy: {name} {a.dtype} {list(a.shape)} bit-exact (safetensors.numpy)")
    loaded_t = torch_load(dst)
    for name, a in arrays.items():
        check(same_bits(loaded_t[name], torch.from_numpy(a.copy())), f"copy: {name} bit-exact (safetensors.torch)")


def part1_sharded_checkpoint():
    print("\n== 1c. Hugging Face-style sharded checkpoint directory -> myriad inspect / convert")
    g = torch.Generator().manual_seed(2)
    shards = {
        "model-00001-of-00002.safetensors": {
            "a.weight": torch.randn(4, 4, generator=g).to(torch.bfloat16),
            "a.bias": torch.randn(4, generator=g),
        },
        "model-00002-of-00002.safetensors": {
            "b.weight": torch.randn(2, 3, generator=g).to(torch.float16),
            "b.step": torch.tensor(12, dtype=torch.int64),
            "b.empty": torch.zeros(2, 0),
        },
    }
    ck = os.path.join(WORK, "ckpt")
    shutil.rmtree(ck, ignore_errors=True)
    os.makedirs(ck)
    weight_map, everything = {}, {}
    for file, ts in shards.items():
        torch_save(ts, os.path.join(ck, file), metadata={"format": "pt"})
        for n, t in ts.items():
            weight_map[n] = file
            everything[n] = t
    total = sum(t.numel() * t.element_size() for t in everything.values())
    with open(os.path.join(ck, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    check_inspect(ck, expected_from_torch(everything), {"format": "pt"}, "sharded checkpoint", sharded_files=weight_map)
    dst = os.path.join(WORK, "ckpt.merged.safetensors")
    run_ok("convert", "--in", ck, "--out", dst)
    if os.path.exists(dst):
        loaded = torch_load(dst)
        check(set(loaded) == set(everything), "merged file holds every tensor of both shards")
        for n, t in everything.items():
            check(n in loaded and same_bits(loaded[n], t), f"merged: {n} bit-exact")


def f32_test_values():
    """F32 values that exercise rounding: random bit patterns, exact ties, subnormals, overflow, specials."""
    rng = np.random.default_rng(3)
    parts = [rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)]
    # bf16 ties: low 16 bits exactly 0x8000 (odd and even kept part), and just below / above.
    hi = rng.integers(0, 2**16, size=4000, dtype=np.uint64).astype(np.uint32) << 16
    parts += [hi | 0x8000, hi | 0x7FFF, hi | 0x8001, hi | 0x0000, hi | 0xFFFF]
    # f16 ties: in the normal f16 range, the low 13 bits exactly 0x1000; in the subnormal range, exact halves of 2^-24.
    exp = rng.integers(113, 143, size=4000, dtype=np.uint64).astype(np.uint32) << 23
    man = rng.integers(0, 2**10, size=4000, dtype=np.uint64).astype(np.uint32) << 13
    sign = rng.integers(0, 2, size=4000, dtype=np.uint64).astype(np.uint32) << 31
    parts += [sign | exp | man | 0x1000, sign | exp | man | 0x0FFF, sign | exp | man | 0x1001]
    k = np.arange(0, 2049, dtype=np.float64)
    halves = ((k + 0.5) * 2.0**-24).astype(np.float32)  # exact ties between f16 subnormals
    parts.append(halves.view(np.uint32))
    parts.append((-halves).view(np.uint32))
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.0, 65519.996, 65520.0, 65536.0, -65520.0, 6.1035156e-05,
         6.097555e-05, 5.9604645e-08, 2.9802322e-08, 2.9802326e-08, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38,
         -3.4028235e38, 3.3895314e38, 3.3961775e38, 1.0, -1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-9],
        dtype=np.float32,
    )
    parts.append(specials.view(np.uint32))
    u = np.concatenate(parts).astype(np.uint32)
    return torch.from_numpy(u.view(np.float32).copy())


def part2_casts():
    print("\n== 2. myriad convert --dtype vs torch .to() (round to nearest even)")
    x = f32_test_values()
    nan = torch.isnan(x)
    print(f"      {x.numel()} f32 values, {int(nan.sum())} of them NaN")
    src = os.path.join(WORK, "cast_src.safetensors")
    ints = torch.tensor([1, -2, 3], dtype=torch.int64)
    u8 = torch.tensor([0, 255], dtype=torch.uint8)
    torch_save({"x": x, "ints": ints, "u8": u8, "x2d": x[:1000].reshape(10, 100).clone()}, src,
               metadata={"kept": "yes"})
    for flag, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        dst = os.path.join(WORK, f"cast_{flag}.safetensors")
        run_ok("convert", "--in", src, "--out", dst, "--dtype", flag)
        if not os.path.exists(dst):
            continue
        got = torch_load(dst)
        want = x.to(dtype)
        g = got["x"]
        check(g.dtype == dtype and g.shape == x.shape, f"--dtype {flag}: x is {DTYPE_NAMES[dtype]} {list(x.shape)}")
        if g.dtype == dtype:
            # NOTE: torch 1.13's f32 -> bf16 NaN is 0xFFFF on its vectorised path and 0x7FC0 on its scalar one, so
            # bf16 NaN bit patterns are not compared (myriad keeps sign and payload, quieted). f16 NaN is
            # sign | 0x7E00 on both sides and is compared.
            keep = ~nan if dtype == torch.bfloat16 else torch.ones_like(nan)
            ok = torch.equal(bits(g)[keep], bits(want)[keep])
            if not ok:
                bad = (bits(g) != bits(want)) & keep
                i = int(bad.nonzero()[0])
                print(f"      first mismatch at {i}: f32 bits {x.view(torch.int32)[i].item() & 0xffffffff:#010x} "
                      f"myriad {bits(g)[i].item() & 0xffff:#06x} torch {bits(want)[i].item() & 0xffff:#06x}; "
                      f"{int(bad.sum())} mismatches")
            what = "non-NaN values" if dtype == torch.bfloat16 else "values (NaN too)"
            check(ok, f"--dtype {flag}: {int(keep.sum())} {what} bit-identical to torch .to({dtype})")
            check(bool(torch.isnan(g[nan].float()).all()), f"--dtype {flag}: every NaN stays NaN")
            k2 = keep[:1000].reshape(10, 100)
            check(torch.equal(bits(got["x2d"])[k2], bits(x[:1000].reshape(10, 100).to(dtype))[k2]),
                  f"--dtype {flag}: a 2-d tensor too")
        check(same_bits(got["ints"], ints) and same_bits(got["u8"], u8), f"--dtype {flag}: integer tensors unchanged")
        check(read_with_torch(dst)[1] == {"kept": "yes"}, f"--dtype {flag}: metadata kept")

        # Back to f32: exact widening, as torch does.
        back = os.path.join(WORK, f"cast_{flag}_f32.safetensors")
        run_ok("convert", "--in", dst, "--out", back, "--dtype", "f32")
        if os.path.exists(back):
            b = torch_load(back)["x"]
            check(b.dtype == torch.float32 and torch.equal(bits(b)[~nan], bits(g.float())[~nan]),
                  f"--dtype f32 of the {flag} file equals torch .float() bit for bit")

    # f16 -> bf16 (through f32, as torch does).
    f16 = os.path.join(WORK, "cast_f16.safetensors")
    b16 = os.path.join(WORK, "cast_f16_bf16.safetensors")
    if os.path.exists(f16):
        run_ok("convert", "--in", f16, "--out", b16, "--dtype", "bf16")
        if os.path.exists(b16):
            h = torch_load(f16)["x"]
            hn = torch.isnan(h)
            got = torch_load(b16)["x"]
            check(torch.equal(bits(got)[~hn], bits(h.to(torch.bfloat16))[~hn]),
                  "--dtype bf16 of an f16 file equals torch f16.to(bfloat16) bit for bit")


def part3_bad_files():
    print("\n== 3. bad files: non-zero exit, one error line")

    def st(header, data=b""):
        h = header.encode()
        return struct.pack("<Q", len(h)) + h + data

    cases = {
        "size_mismatch.safetensors": (st('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"abcd"), "'w'"),
        "truncated.safetensors": (b"\x10\x00\x00", "shorter than"),
        "unknown_dtype.safetensors": (st('{"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}', b"x" * 8), "F64"),
        "not_json.safetensors": (st("{nope"), "JSON"),
        "duplicate.safetensors": (
            st('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],'
               '"data_offsets":[1,2]}}', b"ab"), "duplicate tensor name 'w'"),
    }
    never = os.path.join(WORK, "never.safetensors")
    if os.path.exists(never):
        os.remove(never)
    for name, (raw, needle) in cases.items():
        path = os.path.join(WORK, name)
        with open(path, "wb") as f:
            f.write(raw)
        for args in (["inspect", path], ["inspect", "--json", path],
                     ["convert", "--in", path, "--out", never]):
            r = run(*args)
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            ok = r.returncode != 0 and len(lines) == 1 and path in lines[0] and needle in lines[0] and not r.stdout
            check(ok, f"myriad {args[0]} {name}: exit {r.returncode}, one error line naming the file and {needle!r}")
            if not ok:
                print("      stdout:", r.stdout, "\n      stderr:", r.stderr)
            elif args == ["inspect", path]:
                print("      " + lines[0])
    check(not os.path.exists(never), "failed converts wrote no output")
    r = run("inspect", os.path.join(WORK, "does_not_exist.safetensors"))
    check(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, "inspect of a missing path: one error line")


def main():
    global MYRIAD, WORK
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    MYRIAD, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)  # every file used is (re)written below; nothing else there is touched
    print(f"myriad: {MYRIAD}\nwork dir: {WORK}\ntorch {torch.__version__}, numpy {np.__version__}")
    part1_torch_written()
    part1_numpy_written()
    part1_sharded_checkpoint()
    part2_casts()
    part3_bad_files()
    check.finish("safetensors_interop")


if __name__ == "__main__":
    sys.exit(main())
