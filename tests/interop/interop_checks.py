"""What the Python test scripts share (tests/interop/*.py and the others that import it): printed checks that count
failures, running myriad, and randomizing what `myriad init` leaves constant."""

import subprocess
import sys


class Checks:
    """check(cond, what) prints "ok" or "FAIL" and the description and returns cond; finish(name) prints the tally
    (and what failed) and exits 1 on any failure."""

    def __init__(self):
        self.count = 0
        self.failed = []

    @property
    def failures(self):
        return len(self.failed)

    def __call__(self, cond, what):
        cond = bool(cond)
        self.count += 1
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failed.append(what)
        return cond

    def finish(self, name):
        if self.failed:
            print(f"{name}: {self.failures} of {self.count} checks FAILED:\n  " + "\n  ".join(self.failed))
        else:
            print(f"{name}: all {self.count} checks passed")
        sys.exit(1 if self.failed else 0)


def myriad_runner(binary):
    """run(*args, ok=True): the CompletedProcess of `binary args` (text); with ok, a failure ends the script with its
    stderr."""

    def run(*args, ok=True):
        p = subprocess.run([binary, *args], capture_output=True, text=True)
        if ok and p.returncode != 0:
            sys.exit(f"myriad {' '.join(args)} failed: {p.stderr}")
        return p

    return run


def randomize_constant_inits(path, seed):
    """The tensors `myriad init` sets to constants in a model.safetensors (AttnRes queries' norms 1 and projections 0,
    the router's correction bias 0) moved by N(0, 0.3), so that a fused product, AttnRes's scores or a dropped bias
    cannot match by accident (softmax scores of O(1))."""
    import numpy as np
    from safetensors.numpy import load_file, save_file
    W = load_file(path)
    rng = np.random.default_rng(seed)
    for k in W:
        if k.endswith(("_res_norm.weight", "_res_proj.weight", "e_score_correction_bias")):
            W[k] = (W[k] + rng.normal(0, 0.3, W[k].shape)).astype(W[k].dtype)
    save_file(W, path)
