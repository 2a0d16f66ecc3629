#!/usr/bin/env python3
"""The layering of src/ (docs/architecture.md), checked on every build: each file may include headers of its own
layer and of the layers listed below it, the backend headers (ops/cpu/, ops/cuda/) only from inside src/ops, and
the GPU vendors' headers (CUDA runtime and driver, cuBLAS, NCCL, ...) only from inside src/ops/cuda.
Prints every violation as file:line: what and which rule, and exits 1 when there is one.
  scripts/check_layers.py [SRC_DIR] [--stamp FILE]   (the stamp is touched on success, for the build)"""
import os
import re
import sys

# layer -> the layers it may include (its own is always allowed). Keep in sync with docs/architecture.md and
# the target_link_libraries of CMakeLists.txt.
LAYERS = {
    "core": [],
    "io": ["core"],
    "ops": ["core"],
    "autograd": ["ops", "core"],
    "quant": ["ops", "io", "core"],
    "model": ["autograd", "ops", "io", "core"],
    "data": ["io", "core"],
    "agent": ["data", "io", "core"],
    "dist": ["model", "autograd", "ops", "io", "core"],
    "infer": ["model", "quant", "data", "autograd", "ops", "io", "core"],
    "train": ["agent", "dist", "infer", "model", "quant", "data", "autograd", "ops", "io", "core"],
    "report": ["model", "io", "core"],
    "deploy": ["train", "agent", "dist", "infer", "model", "quant", "data", "autograd", "ops", "io", "core"],
    "serve": ["dist", "infer", "model", "quant", "data", "autograd", "ops", "io", "core"],
    "rl": ["serve", "train", "agent", "dist", "infer", "model", "quant", "data", "autograd", "ops", "io", "core"],
    "bench": ["serve", "train", "agent", "dist", "infer", "model", "quant", "data", "autograd", "ops", "io", "core"],
}
# Layers split into rooms (subfolders), each room -> the rooms of the same layer it may include (its own always).
# Every file of such a layer lives in one of its rooms.
ROOMS = {
    "data": {
        "tokenize": [],  # tokenizers, their pieces, and the text files they are trained on
        "media": [],  # image and video decoding
        "chat": ["tokenize"],  # chat formats, conversations, the tool-call grammar
        "datasets": ["tokenize", "chat", "media"],  # corpus and tasks, shards and loader, image and video sets
    },
}
BACKENDS = ("ops/cpu/", "ops/cuda/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>')
# GPU vendor headers: the CUDA toolkit's libraries and NCCL.
VENDOR = re.compile(r"^(cuda|cublas|cublasLt|cudnn|curand|cusparse|cusolver|cufft|nccl|nvrtc|nvToolsExt|thrust/|cub/)")


def main():
    args = sys.argv[1:]
    stamp = None
    if "--stamp" in args:
        i = args.index("--stamp")
        stamp = args[i + 1]
        del args[i : i + 2]
    if args == ["--self-test"]:
        return self_test()
    src = args[0] if args else default_src()
    problems = check(src)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} layering violation(s); see docs/architecture.md", file=sys.stderr)
        return 1
    if stamp:
        with open(stamp, "w") as f:
            f.write("ok\n")
    return 0


def default_src():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def check(src):
    problems = []
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            layer = rel.split("/")[0]
            if layer not in LAYERS:
                problems.append(f"{rel}: folder '{layer}' is not a layer (add it to scripts/check_layers.py)")
                continue
            allowed = set(LAYERS[layer]) | {layer}
            room = None
            if layer in ROOMS:
                room = rel.split("/")[1] if rel.count("/") >= 2 else None
                if room not in ROOMS[layer]:
                    problems.append(f"src/{rel}: every file of src/{layer} lives in one of its rooms "
                                    f"({', '.join(ROOMS[layer])}; scripts/check_layers.py)")
                    continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    sm = SYSTEM_INCLUDE.match(line)
                    if sm and VENDOR.match(sm.group(1)) and not rel.startswith("ops/cuda/"):
                        problems.append(f"src/{rel}:{n}: includes the GPU vendor header <{sm.group(1)}>: only "
                                        f"src/ops/cuda may (the rest of the tree reaches a GPU through the ops)")
                        continue
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    inc = m.group(1)
                    target = inc.split("/")[0]
                    if target not in LAYERS:
                        continue  # a library header such as "httplib.h" or a relative one
                    if inc.startswith(BACKENDS) and layer != "ops":
                        problems.append(f"src/{rel}:{n}: includes the backend header {inc}: only src/ops may "
                                        f"(call the dispatched op instead)")
                    elif target not in allowed:
                        problems.append(f"src/{rel}:{n}: layer '{layer}' includes {inc} from layer '{target}', "
                                        f"which is not below it (allowed: {', '.join(sorted(allowed))})")
                    elif target in ROOMS:
                        to_room = inc.split("/")[1] if inc.count("/") >= 2 else None
                        rooms_ok = [room] + ROOMS[target][room] if target == layer else list(ROOMS[target])
                        if to_room not in ROOMS[target]:
                            problems.append(f"src/{rel}:{n}: includes {inc}, which is in no room of '{target}' "
                                            f"({', '.join(ROOMS[target])})")
                        elif to_room not in rooms_ok:
                            problems.append(f"src/{rel}:{n}: room '{layer}/{room}' includes {inc} from room "
                                            f"'{target}/{to_room}', which is not below it (allowed: "
                                            f"{', '.join(sorted(rooms_ok))})")
    return problems


def self_test():
    """The checker must fail on each kind of violation and pass a clean tree."""
    import shutil
    import tempfile

    made = []

    def tree(files):
        d = tempfile.mkdtemp(prefix="check_layers.")
        made.append(d)
        for rel, text in files.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        return d

    clean = {"core/a.h": "#pragma once\n", "model/m.cc": '#include "core/a.h"\n#include "model/m.h"\n',
             "ops/cpu/k.h": "", "ops/o.cc": '#include "ops/cpu/k.h"\n',
             "ops/cuda/c.cu": "#include <cuda_runtime.h>\n#include <cublas_v2.h>\n",
             "data/tokenize/t.h": "", "data/chat/c.cc": '#include "data/tokenize/t.h"\n',
             "data/datasets/d.cc": '#include "data/chat/c.h"\n#include "data/media/i.h"\n',
             "agent/a.cc": '#include "data/chat/c.h"\n'}
    cases = {
        "upward include": {"core/a.cc": '#include "model/m.h"\n'},
        "sideways include": {"data/tokenize/s.cc": '#include "model/m.h"\n'},
        "backend header outside ops": {"serve/s.cc": '#include "ops/cpu/k.h"\n'},
        "vendor header outside ops/cuda": {"dist/n.cc": "#include <nccl.h>\n"},
        "vendor header elsewhere in ops": {"ops/o2.cc": "#include <cuda_runtime.h>\n"},
        "unknown folder": {"misc/x.cc": ""},
        "a file outside the rooms": {"data/loose.cc": ""},
        "a room including one above it": {"data/tokenize/t.cc": '#include "data/chat/c.h"\n'},
        "a room including a sideways one": {"data/media/i.cc": '#include "data/tokenize/t.h"\n'},
        "an include outside the rooms": {"agent/b.cc": '#include "data/loose.h"\n'},
    }
    failures = 0
    if check(tree(clean)):
        print("self-test: a clean tree was refused", file=sys.stderr)
        failures += 1
    for what, extra in cases.items():
        if not check(tree({**clean, **extra})):
            print(f"self-test: {what} was not caught", file=sys.stderr)
            failures += 1
    for d in made:
        shutil.rmtree(d, ignore_errors=True)
    print("check_layers self-test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
