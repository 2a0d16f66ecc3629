#!/usr/bin/env python3
"""The docs' commands still parse: every `myriad COMMAND [SUB]` that README.md and docs/*.md name must answer
`COMMAND [SUB] --help` with status 0, and every --flag such a line uses must appear in that help.

usage: tests/docs/readme_commands.py PATH/TO/myriad REPO_ROOT

Where invocations are found: lines inside ``` fences (anywhere on the line: after `mpirun -np N`, an environment
assignment or `&&`; a line ending in a backslash continues on the next), and inline `code` spans (which may wrap
across lines) whose text starts with `myriad `, `./build/release/myriad ` or `build/release/myriad `. Placeholders
(`myriad COMMAND --help`) are skipped; `train|sft` checks both. A command has subcommands when its --help shows
`myriad COMMAND WORD` (or, in the tokenizer's one-line usage, `| WORD --`); a lowercase word after such a command
must be one of them. Stdlib only; exits 1 after listing every failure as FILE:LINE: command: what is wrong.
"""
import glob
import os
import re
import subprocess
import sys

PREFIX = r"(?:\./)?(?:build/release/)?myriad"
# How a shell command may begin before `myriad`: a prompt, environment assignments, `time`, an MPI launcher.
LEAD = r"^\s*(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:time\s+)?(?:(?:scripts/mpirun\.sh|mpirun)\s+-np\s+\S+\s+)?"
START_RE = re.compile(LEAD + PREFIX + r"\s+")
FENCE_RE = re.compile(r"^\s*(```+|~~~+)[\w+.-]*\s*$")
WORD_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
FLAG_RE = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


def fenced_lines(lines):
    """The 1-based numbers of the lines inside ``` fences (the fence lines themselves excluded)."""
    inside, fence = set(), None
    for number, line in enumerate(lines, 1):
        m = FENCE_RE.match(line)
        if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
            fence = m.group(1) if fence is None else None
            continue
        if fence is not None:
            inside.add(number)
    return inside


def commands_in(text):
    """The text after `myriad` of each shell command in TEXT that runs myriad (commands split at && ; ||)."""
    out = []
    for part in re.split(r"&&|\|\||;", text):
        m = START_RE.match(part)
        if m:
            out.append(re.split(r"\s&\s|\s&$", part[m.end():])[0])
    return out


def strip_comment(line):
    """Drop a shell comment (` # ...`) from a fenced line."""
    m = re.search(r"(^|\s)#", line)
    return line[: m.start()] if m else line


def invocations_in_fences(lines, inside):
    """(line number, text after `myriad`) for every invocation inside ``` fences."""
    out = []
    pending = None  # (line number, joined text) of a line continued with a backslash
    for number, raw in enumerate(lines, 1):
        if number not in inside:
            pending = None
            continue
        line = strip_comment(raw)
        if pending:
            start, line = pending[0], pending[1] + " " + line.strip()
        else:
            start = number
        if line.rstrip().endswith("\\"):
            pending = (start, line.rstrip()[:-1])
            continue
        pending = None
        out += [(start, rest) for rest in commands_in(line)]
    return out


def invocations_inline(lines, inside):
    """(line number, text after `myriad`) for every inline code span whose text starts with a myriad command."""
    out = []
    # Blank out the fenced lines (keeping the newlines, so that offsets still give line numbers).
    masked = "\n".join(" " * len(l) if n in inside or FENCE_RE.match(l) else l for n, l in enumerate(lines, 1))
    for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", masked, flags=re.S):
        body = " ".join(m.group(2).split())
        if not START_RE.match(body):
            continue
        line = masked.count("\n", 0, m.start()) + 1
        out += [(line, rest) for rest in commands_in(body)]
    return out


class Helps:
    """`myriad ARGS --help`, run once per distinct ARGS."""

    def __init__(self, binary):
        self.binary = binary
        self.cache = {}

    def get(self, args):
        key = tuple(args)
        if key not in self.cache:
            try:
                p = subprocess.run([self.binary, *args, "--help"], capture_output=True, text=True, timeout=60)
                self.cache[key] = (p.returncode, p.stdout + p.stderr)
            except (OSError, subprocess.TimeoutExpired) as e:
                self.cache[key] = (-1, str(e))
        return self.cache[key]

    def subcommands(self, command):
        rc, text = self.get([command])
        if rc != 0:
            return set()
        subs = set(re.findall(r"myriad\s+" + re.escape(command) + r"\s+([a-z][a-z0-9_-]*)", text))
        usage = text.split("\n\n", 1)[0]
        if "myriad " + command + " " in usage:
            subs |= set(re.findall(r"\|\s+([a-z][a-z0-9_-]*)\s+--", usage))
        return subs


def check(binary, root):
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    helps = Helps(binary)
    failures = []
    seen = 0
    checked = set()
    for path in files:
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.split("\n")
        inside = fenced_lines(lines)
        found = invocations_in_fences(lines, inside) + invocations_inline(lines, inside)
        for line, rest in sorted(found):
            tokens = rest.split()
            if not tokens:
                continue
            where = f"{rel}:{line}"
            shown = "myriad " + " ".join(tokens)
            if len(shown) > 100:
                shown = shown[:97] + "..."
            commands = tokens[0].split("|")
            if not all(WORD_RE.match(c) for c in commands):
                continue  # a placeholder: myriad COMMAND --help
            seen += 1
            flags = sorted(set(FLAG_RE.findall(rest)) - {"help"})
            for command in commands:
                rc, help_text = helps.get([command])
                if rc != 0:
                    failures.append(f"{where}: {shown}: `myriad {command} --help` exits {rc}: "
                                    f"{help_text.strip().splitlines()[-1] if help_text.strip() else 'no output'}")
                    continue
                subs = helps.subcommands(command)
                named = []
                if len(tokens) > 1 and subs:
                    candidates = tokens[1].split("|")
                    if all(WORD_RE.match(c) for c in candidates):
                        for sub in candidates:
                            if sub in subs:
                                named.append(sub)
                            else:
                                failures.append(f"{where}: {shown}: `{sub}` is not a subcommand of `myriad {command}` "
                                                f"(its --help names: {', '.join(sorted(subs))})")
                targets = [[command, sub] for sub in named] or [[command]]
                for args in targets:
                    checked.add(" ".join(args))
                    rc, help_text = helps.get(args)
                    if rc != 0:
                        failures.append(f"{where}: {shown}: `myriad {' '.join(args)} --help` exits {rc}")
                        continue
                    for flag in flags:
                        if not re.search(r"--" + re.escape(flag) + r"(?![a-z0-9-])", help_text):
                            failures.append(f"{where}: {shown}: --{flag} is not in `myriad {' '.join(args)} --help`")
    for f in failures:
        print(f)
    print(f"readme_commands: {seen} invocations in {len(files)} files, {len(checked)} distinct commands checked, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(check(sys.argv[1], sys.argv[2]))
