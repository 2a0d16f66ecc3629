"""What the interop scripts (tests/interop/*.py) share: printed checks that count failures, and running myriad."""

import subprocess
import sys


class Checks:
    """check(cond, what) prints "ok" or "FAIL" and the description; finish(name) prints the tally and exits 1 on
    any failure."""

    def __init__(self):
        self.failures = 0

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            self.failures += 1

    def finish(self, name):
        print(f"{name}: {'all checks passed' if not self.failures else f'{self.failures} FAILED'}")
        sys.exit(1 if self.failures else 0)


def myriad_runner(binary):
    """run(*args, ok=True): the CompletedProcess of `binary args` (text); with ok, a failure ends the script with its
    stderr."""

    def run(*args, ok=True):
        p = subprocess.run([binary, *args], capture_output=True, text=True)
        if ok and p.returncode != 0:
            sys.exit(f"myriad {' '.join(args)} failed: {p.stderr}")
        return p

    return run
