#!/usr/bin/env python3
"""`mpirun myriad train` against one process (issue 16), end to end through the CLI, on this 2-core machine.

usage: parallel_train_test.py MYRIAD SOURCE_DIR WORK_DIR      (stdlib only; runs under ctest as train_parallel)

Checks, on configs/tiny.json for 20 steps of 8 sequences of 128 tokens (one stage), every layout against the
one-process run of the same data:
  1. dp 2, ep 2, sp 2 (2 ranks); dp 4, ep 4, dp 2 x ep 2, dp 2 x sp 2, ep 2 x sp 2 (4 ranks, oversubscribed).
     - Step 1's loss equals the one-process loss bit for bit: the same forward (each rank's sequences, the
       expert-parallel products cut per source rank, the same initial weights on every shard). With sp, within
       rel 1e-7: the state entering a shard is composed (M S + S~), which rounds differently from one recurrence
       (measured ~5e-9), and that flips a near-tie routing within a few steps (measured: step 3-4).
     - Every later step's loss within rel 1e-5 while the routing (the per-expert loads of every MoE layer) has
       agreed with the one-process run at every step so far. NOTE: the runs are not bit-identical after step 1:
       float32 sums the step's gradients in another order (per rank, then over ranks), which moves the weights by
       ~1e-7 relative. Where a token's router scores are a near-tie that is enough to flip one top-k choice;
       quantile balancing then reacts to the moved copy, and from there the runs are two different (equally
       valid) trajectories. After the first differing load the test asks only rel 1e-3 (the same training, not
       equality) and prints the step. Measured: dp 2, ep 2 and ep 4 never flip in these 20 steps (<= 6e-8);
       dp 4 and dp 2 x ep 2 flip at step 16 (then <= 2e-5).
     - The final weights (the checkpoint: one file, or with ep one shard per rank and an index) within 1e-4 of
       each tensor's largest value when the routing never differed (AdamW divides by sqrt(v), so an element whose gradient is near zero
       turns a 1e-7 relative difference of its gradient into a larger one of its update; measured <= 4e-5).
     ZeRO-1 (dp 2; dp 2 x ep 2): every loss and the final weights equal the same layout without it bit for bit,
     and rank 0 keeps about 1 / ranks of the optimizer state.
  2. Resharding: 10 steps on 2 ranks (ep 2), resumed to 15 on 4 (dp 2 x ep 2), resumed to 20 on 1; and a ZeRO-1
     run resumed in one process: steps 11-20 as in the uninterrupted one-process run, by the same rule.
  3. Faults: a rank killed (SIGKILL) mid-run ends the job with OpenMPI's message naming the rank in under 60 s; a
     rank stopped (SIGSTOP) mid-run: rank 0's collective watchdog (MYRIAD_COLLECTIVE_TIMEOUT_S=10 here) ends the
     job in under 60 s with its message; ranks started with different model configs are refused at start with one
     message naming the rank.
  4. The planner: `myriad plan --recipe myriad-cpu` for the 2-rank layouts gives the weights and optimizer bytes
     rank 0 held (its metrics' memory record), and gradients within 1% (those of tensors the step reached).
  5. Bad layouts: --ep 3 on 3 ranks (does not divide 8 experts) and --dp 3 on 2 ranks: one error each, nothing
     written.
  6. Expert-parallel inference: `generate` (sampled) and `eval` (prefill and --decode) with --ep 2 and --ep 4 print
     exactly what one process prints.
  7. Expert-parallel serving: `mpirun -np 2 myriad serve --ep 2` answers completions (greedy with logprobs, and
     sampled) exactly as a one-process server does; SIGTERM ends it. Sequence-parallel serving (`--sp 2`): long
     prompts prefilled by both ranks give one process's completions (logprobs within 1e-4). Data-parallel serving
     (`--dp 2`): a request the front forwards to its replica is answered as one process answers it, streamed or not;
     a client leaving a forwarded stream cancels it on the replica.
  8. Fine-tuning: `myriad sft` with dp 2, ep 2, sp 2 and dp 2 x ep 2 against one process, by the rule of 1.
  9. GRPO with --dp 2 and with --ep 2: the rollouts and loss up to the first update as one process's; under --ep the
     held-out evaluation too, the checkpoint sharded and resumed by one process; --sp 2 and --ep 2 x --sp 2 (each sp
     rank training on its shard of every sequence) by the same rule; a --dp that does not divide the prompts refused
     once.
  10. Image-text training (a vision-language model) with dp 2 and ep 2 against one process, by the rule of 1.
  Also (1c): the gradient all-reduce overlapped with the backward (--grad-sync overlap) against after it (the
  CPU default): on 2 ranks every loss and the final weights bit for bit.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import re
import struct
import time
import urllib.error
import urllib.request
from array import array

MYRIAD, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
MPIRUN = ["bash", os.path.join(SRC, "scripts", "mpirun.sh")]
CONFIG = os.path.join(SRC, "configs", "tiny.json")
sys.path.insert(0, os.path.join(SRC, "tests", "interop"))
from interop_checks import Checks  # noqa: E402
SERVERS = []  # the servers started (section 7), ended at exit whatever happens


check = Checks()


def env():
    e = dict(os.environ)
    e["MYRIAD_THREADS"] = "1"  # every process one thread: the ranks share 2 cores
    return e


def run(cmd, timeout=600):
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), timeout=timeout)
    return p.returncode, p.stdout, time.time() - t0


def train_args(out, train_config, extra=()):
    return [MYRIAD, "train", "--config", CONFIG, "--train-config", train_config, "--data", f"{WORK}/prep/data",
            "--tokenizer", f"{WORK}/prep/tokenizer", "--out", out, "--quiet", *extra]


def steps(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == "step":
                out[r["step"]] = r
    return out


def loads(rec):
    return [m["load"] for m in rec.get("moe", [])]


def compare_steps(name, want, got, first, last):
    """The rule of the module docstring over steps first..last; returns the first step whose routing differs."""
    flip = None
    worst_before, worst_after = 0.0, 0.0
    for s in range(first, last + 1):
        if s not in got:
            check(False, f"{name}: step {s} missing")
            return flip
        a, b = want[s]["loss"], got[s]["loss"]
        rel = abs(a - b) / abs(a)
        if flip is None and loads(want[s]) != loads(got[s]):
            flip = s
        if flip is None:
            worst_before = max(worst_before, rel)
        else:
            worst_after = max(worst_after, rel)
    check(worst_before <= 1e-5, f"{name}: steps {first}-{last} with the same routing within rel 1e-5 "
          f"(worst {worst_before:.2e})")
    if flip is not None:
        check(worst_after <= 1e-3, f"{name}: routing first differs at step {flip} (a near-tie); after it within "
              f"rel 1e-3 (worst {worst_after:.2e})")
    return flip


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        s, e = v["data_offsets"]
        a = array("f")
        a.frombytes(b[8 + n + s:8 + n + e])
        out[k] = a
    return out


def read_model(step_dir):
    """Every tensor of a checkpoint: model.safetensors, or the shards model.safetensors.index.json names."""
    index = os.path.join(step_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(step_dir, "model.safetensors"))
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for shard in sorted(set(weight_map.values())):
        part = read_safetensors(os.path.join(step_dir, shard))
        check(all(weight_map[k] == shard for k in part), f"{step_dir}: {shard} holds only what the index maps there")
        out.update(part)
    return out


def compare_weights(name, want_dir, got_dir, ep):
    step = os.path.join(got_dir, "checkpoints", "step-000020")
    sharded = os.path.exists(os.path.join(step, "model.safetensors.index.json"))
    check(sharded == (ep > 1) and (not sharded or len([f for f in os.listdir(step) if f.startswith("model-")]) == ep),
          f"{name}: the checkpoint is {'sharded ' + str(ep) + ' ways' if ep > 1 else 'one file'}")
    w = read_model(os.path.join(want_dir, "checkpoints", "step-000020"))
    g = read_model(step)
    check(sorted(w) == sorted(g), f"{name}: the checkpoint holds every tensor ({len(g)} of {len(w)})")
    worst, where = 0.0, ""
    for k in w:
        if k not in g:
            continue
        m = max(max(abs(x) for x in w[k]), 1e-12)
        d = max(abs(x - y) for x, y in zip(w[k], g[k])) / m
        if d > worst:
            worst, where = d, k
    check(worst <= 1e-4, f"{name}: final weights within 1e-4 of each tensor's largest value (worst {worst:.2e}, "
          f"{where})")


def find_rank(p, run_dir, rank):
    """The pid of rank `rank` of the job p training into run_dir, once it has logged 3 steps (None if it ends)."""
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        time.sleep(0.5)
        if not os.path.exists(f"{run_dir}/metrics.jsonl") or len(steps(run_dir)) < 3:
            continue
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            if run_dir.encode() in cmd and f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
                return int(pid)
    return None


def cross_check_plan(name, run_dir, flags):
    """myriad plan --recipe myriad-cpu for this layout against what rank 0 of the run held (its memory record)."""
    dims = {"--dp": "1", "--ep": "1", "--sp": "1"}
    dims.update(dict(zip(flags[::2], flags[1::2])))
    rc, out, _ = run([MYRIAD, "plan", "--config", CONFIG, "--gpus", "2", "--dp", dims["--dp"], "--ep", dims["--ep"],
                      "--sp", dims["--sp"],
                      "--recipe", "myriad-cpu", "--gpu", "cpu", "--mem-gb", "24", "--peak-tflops", "0.1",
                      "--intra-gbs", "10", "--inter-gbs", "10", "--seq", "128", "--batch-tokens", "1024", "--json"])
    check(rc == 0, f"{name}: myriad plan for the layout" + ("" if rc == 0 else "\n" + out[-2000:]))
    if rc != 0:
        return
    plan = json.loads(out)["chosen"]["memory_bytes"]
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        mem = [json.loads(line) for line in f if '"memory"' in line][0]
    check(mem["weights_bytes"] == plan["weights"] and mem["optimizer_bytes"] == plan["optimizer"],
          f"{name}: the plan's weights and optimizer bytes per rank equal what rank 0 held "
          f"({plan['weights']:.0f} and {plan['optimizer']:.0f} B)")
    # Gradients are allocated on first use: a tensor whose gradient is structurally zero has none (layer 0's
    # attention AttnRes query and its norm: a softmax over the one source there is constant), nor would an expert
    # no token chose.
    check(0.99 * plan["gradients"] <= mem["gradients_bytes"] <= plan["gradients"],
          f"{name}: gradients held {mem['gradients_bytes']:.0f} B, the plan {plan['gradients']:.0f} B")
    grew = mem["resident_peak_bytes"] - mem["resident_before_steps_bytes"]
    print(f"info {name}: resident memory grew {grew / 1e6:.1f} MB over the first step; the plan's activation floor "
          f"{plan['activations_full'] / 1e6:.1f} MB and gradients {plan['gradients'] / 1e6:.1f} MB", flush=True)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    t20 = os.path.join(WORK, "t20.json")
    with open(t20, "w") as f:
        json.dump({"stages": [{"seq_len": 128, "steps": 20}], "batch_tokens": 1024, "lr": 0.004, "warmup_steps": 5,
                   "min_lr_ratio": 0.1, "weight_decay": 0.05, "clip": 1.0, "eval_every": 10, "eval_batches": 2,
                   "task_eval_per_task": 0, "checkpoint_every": 10, "keep_checkpoints": 3, "log_every": 5,
                   "kda_chunk": 32}, f)
    # The data and tokenizer once (the built-in corpus), then every run reads them.
    rc, out, _ = run([MYRIAD, "train", "--config", CONFIG, "--train-config", t20, "--out", f"{WORK}/prep",
                      "--quiet", "--stop-after", "0"])
    assert rc == 0, out
    rc, out, t_single = run(train_args(f"{WORK}/single", t20))
    assert rc == 0, out
    single = steps(f"{WORK}/single")
    print(f"one process: 20 steps in {t_single:.1f} s", flush=True)

    # 1. Layouts.
    for np_, flags in [(2, ["--dp", "2"]), (2, ["--ep", "2"]), (4, ["--dp", "4"]), (4, ["--ep", "4"]),
                       (4, ["--dp", "2", "--ep", "2"]), (2, ["--sp", "2"]), (4, ["--dp", "2", "--sp", "2"]),
                       (4, ["--ep", "2", "--sp", "2"])]:
        name = f"np {np_} {' '.join(flags)}"
        d = f"{WORK}/np{np_}{''.join(flags).replace('-', '')}"
        rc, out, t = run(MPIRUN + ["-np", str(np_)] + train_args(d, t20, flags))
        check(rc == 0, f"{name}: exit 0 ({t:.1f} s)" + ("" if rc == 0 else "\n" + out[-3000:]))
        if rc != 0:
            continue
        got = steps(d)
        if "--sp" in flags:  # the composed KDA state M S + S~ rounds differently from one recurrence
            rel = abs(got[1]["loss"] - single[1]["loss"]) / single[1]["loss"]
            check(rel <= 1e-7, f"{name}: step 1 loss within rel 1e-7 ({rel:.1e})")
        else:
            check(got[1]["loss"] == single[1]["loss"], f"{name}: step 1 loss bit-identical "
                  f"({got[1]['loss']!r} vs {single[1]['loss']!r})")
        flip = compare_steps(name, single, got, 1, 20)
        if flip is None:
            ep = int(flags[flags.index("--ep") + 1]) if "--ep" in flags else 1
            compare_weights(name, f"{WORK}/single", d, ep)
        check("parallel: " in out and "gradient all-reduce" in out, f"{name}: rank 0 reports the layout once")
        if np_ == 2:
            cross_check_plan(name, d, flags)

    # 1b. ZeRO-1: the same weights as without it, bit for bit, with each rank keeping its share of Adam's state.
    for np_, flags in [(2, ["--dp", "2"]), (4, ["--dp", "2", "--ep", "2"])]:
        name = f"np {np_} {' '.join(flags)} --zero1"
        base = f"{WORK}/np{np_}{''.join(flags).replace('-', '')}"
        d = base + "zero1"
        rc, out, t = run(MPIRUN + ["-np", str(np_)] + train_args(d, t20, flags + ["--zero1"]))
        check(rc == 0, f"{name}: exit 0 ({t:.1f} s)" + ("" if rc == 0 else "\n" + out[-3000:]))
        if rc != 0:
            continue
        want, got = steps(base), steps(d)
        check(all(want[s]["loss"] == got[s]["loss"] for s in range(1, 21)), f"{name}: every loss equals the run "
              "without ZeRO-1 bit for bit")
        step20 = lambda r: os.path.join(r, "checkpoints", "step-000020")
        check(read_model(step20(base)) == read_model(step20(d)), f"{name}: the final weights equal bit for bit")
        mem = lambda r: [json.loads(line) for line in open(os.path.join(r, "metrics.jsonl")) if '"memory"' in line][0]
        ratio = mem(d)["optimizer_bytes"] / mem(base)["optimizer_bytes"]
        check(ratio <= 1.0 / np_ + 0.1, f"{name}: rank 0 keeps {ratio:.2f} of the optimizer state (1/{np_} of it "
              "ideally)")

    # 1c. The gradient all-reduce overlapped with the backward (--grad-sync overlap) against after it (the CPU
    # default, section 1's runs): the same sums, so every loss and the final weights bit for bit on 2 ranks (a + b
    # rounds one way), and the same rule as above on 4.
    for flags in (["--dp", "2"], ["--dp", "2", "--ep", "2"]):
        np_ = 2 if len(flags) == 2 else 4
        name = f"np {np_} {' '.join(flags)} --grad-sync overlap"
        base = f"{WORK}/np{np_}{''.join(flags).replace('-', '')}"
        d = base + "overlap"
        rc, out, t = run(MPIRUN + ["-np", str(np_)] + train_args(d, t20, flags + ["--grad-sync", "overlap"]))
        check(rc == 0, f"{name}: exit 0 ({t:.1f} s)" + ("" if rc == 0 else "\n" + out[-3000:]))
        if rc != 0 or not os.path.exists(base):
            continue
        want, got = steps(base), steps(d)
        if np_ == 2:
            check(all(want[s]["loss"] == got[s]["loss"] for s in range(1, 21)), f"{name}: every loss equals the "
                  "run reducing after the backward bit for bit")
            step20 = lambda r: os.path.join(r, "checkpoints", "step-000020")
            check(read_model(step20(base)) == read_model(step20(d)), f"{name}: the final weights equal bit for bit")
        else:  # dp 2 x ep 2: the dense sums run over 4 ranks, in messages of other sizes
            compare_steps(name + " vs after the backward", want, got, 1, 20)
        hidden = sum(r.get("grad_sync_overlapped_s", 0) for r in got.values())
        check(hidden > 0 and all(r.get("grad_sync_overlapped_s", 0) == 0 for r in want.values()),
              f"{name}: only the overlapped run reduced inside the backward ({hidden:.3f} s there)")

    # 2. Resharding: a run started on some ranks, resumed on others (the same run directory, its own train.json).
    def resume(d, np_, flags, what):
        cmd = [MYRIAD, "train", "--config", CONFIG, "--data", f"{WORK}/prep/data", "--tokenizer",
               f"{WORK}/prep/tokenizer", "--resume", d, "--quiet", *flags]
        rc, out, _ = run(cmd if np_ == 1 else MPIRUN + ["-np", str(np_)] + cmd)
        check(rc == 0, f"reshard: {what}" + ("" if rc == 0 else "\n" + out[-3000:]))
        return rc == 0

    def start(d, np_, flags, what):
        rc, out, _ = run(MPIRUN + ["-np", str(np_)] + train_args(d, t20, flags + ["--stop-after", "10"]))
        check(rc == 0, f"reshard: 10 steps {what}" + ("" if rc == 0 else "\n" + out[-3000:]))

    # 2 -> 4 -> 1.
    d = f"{WORK}/reshard"
    start(d, 2, ["--ep", "2"], "on 2 ranks (ep 2)")
    resume(d, 4, ["--dp", "2", "--ep", "2", "--stop-after", "15"], "resumed to step 15 on 4 ranks (dp 2 x ep 2)")
    if resume(d, 1, [], "resumed to step 20 in one process"):
        compare_steps("reshard 2 -> 4 -> 1", single, steps(d), 11, 20)
    # A sequence-parallel run resumed in one process.
    d = f"{WORK}/reshard_sp"
    start(d, 2, ["--sp", "2"], "on 2 ranks with --sp 2")
    if resume(d, 1, [], "the --sp 2 run resumed to step 20 in one process"):
        want, got = steps(f"{WORK}/np2sp2"), steps(d)  # the uninterrupted --sp 2 run, up to where it stopped
        check(all(want[s]["loss"] == got[s]["loss"] for s in range(1, 11)), "reshard: its first 10 steps are the "
              "uninterrupted --sp 2 run's")
        check(all(s in got for s in range(11, 21)), "reshard: steps 11-20 continue in one process")
    # A ZeRO-1 checkpoint (the optimizer state in one shard per rank) resumed in one process.
    d = f"{WORK}/reshard_zero1"
    start(d, 2, ["--dp", "2", "--zero1"], "on 2 ranks with ZeRO-1")
    if resume(d, 1, [], "the ZeRO-1 run resumed to step 20 in one process"):
        compare_steps("reshard ZeRO-1 2 -> 1", single, steps(d), 11, 20)

    # 3a. A killed rank ends the job.
    t300 = os.path.join(WORK, "t300.json")
    with open(t300, "w") as f:
        json.dump({"stages": [{"seq_len": 128, "steps": 300}], "batch_tokens": 1024, "eval_every": 1000,
                   "eval_batches": 1, "task_eval_per_task": 0, "checkpoint_every": 1000, "kda_chunk": 32}, f)
    def fault(name, sig, extra_env, wants):
        """Signals rank 1 of a running 2-rank job; the job must end within 60 s, non-zero, its output holding wants."""
        d = f"{WORK}/{name}"
        e = env()
        e.update(extra_env)
        p = subprocess.Popen(MPIRUN + ["-np", "2"] + train_args(d, t300, ["--dp", "2"]), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=e)
        victim = find_rank(p, d, 1)
        check(victim is not None, f"{name} rank: found rank 1 of a running job")
        if victim is None:
            p.kill()
            p.wait()
            return
        os.kill(victim, sig)
        t0 = time.time()
        try:
            out, _ = p.communicate(timeout=60)
            ok = p.returncode != 0 and all(w in out for w in wants)
            check(ok, f"{name} rank: the job ended in {time.time() - t0:.1f} s (< 60), exit {p.returncode}, saying "
                  f"{wants}" + ("" if ok else "\n" + out[-2000:]))
        except subprocess.TimeoutExpired:
            os.kill(victim, signal.SIGKILL)
            p.kill()
            check(False, f"{name} rank: the job still ran 60 s after rank 1 was signalled")

    # 3a. A killed rank: mpirun ends the job. 3b. A rank that stops responding (SIGSTOP): the others' collective
    # watchdog does.
    fault("killed", signal.SIGKILL, {}, ["rank 1"])
    fault("stopped", signal.SIGSTOP, {"MYRIAD_COLLECTIVE_TIMEOUT_S": "10"}, ["(rank 0): waited", "stopped responding"])

    # 3c. Different model configs across ranks.
    other = os.path.join(WORK, "other.json")
    with open(CONFIG) as f:
        c = json.load(f)
    c["rope_theta"] = float(c.get("rope_theta", 10000.0)) * 2
    with open(other, "w") as f:
        json.dump(c, f)
    a = train_args(f"{WORK}/mismatch", t20, ["--dp", "2"])
    b = list(a)
    b[b.index(CONFIG)] = other
    rc, out, t = run(MPIRUN + ["-np", "1"] + a + [":", "-np", "1"] + b, timeout=120)
    check(rc != 0 and "rank 1 has a different model config" in out,
          f"mismatched configs refused at start ({t:.1f} s)" + ("" if rc != 0 else "\n" + out[-2000:]))

    # 8. Fine-tuning under mpirun: `myriad sft` on the 20-step model with dp 2, ep 2, sp 2 against one process, by
    # the rule of section 1 (its data order is global too: every rank reads the whole step and trains its block).
    rc, out, _ = run([MYRIAD, "agent", "demos", "--out", f"{WORK}/demos.jsonl", "--n", "120", "--seed", "1"])
    check(rc == 0, "agent demos for SFT" + ("" if rc == 0 else "\n" + out[-2000:]))
    sft_cfg = os.path.join(WORK, "sft.json")
    with open(sft_cfg, "w") as f:
        json.dump({"stages": [{"seq_len": 256, "steps": 8}], "batch_tokens": 1024, "lr": 0.002, "warmup_steps": 2,
                   "eval_every": 4, "eval_batches": 1, "task_eval_per_task": 0, "checkpoint_every": 4,
                   "log_every": 1000, "seed": 3, "kda_chunk": 32}, f)

    def sft_args(out, extra=()):
        return [MYRIAD, "sft", "--model", f"{WORK}/single", "--data", f"{WORK}/demos.jsonl", "--train-config",
                sft_cfg, "--agent-eval", "0", "--out", out, "--quiet", *extra]
    rc, out, _ = run(sft_args(f"{WORK}/sft1"))
    check(rc == 0, "sft in one process" + ("" if rc == 0 else "\n" + out[-2000:]))
    if rc == 0:
        sft_single = steps(f"{WORK}/sft1")
        for np_, flags in [(2, ["--dp", "2"]), (2, ["--ep", "2"]), (2, ["--sp", "2"]), (4, ["--dp", "2", "--ep", "2"])]:
            name = f"sft np {np_} {' '.join(flags)}"
            d = f"{WORK}/sft{''.join(flags).replace('-', '')}"
            rc, out, t = run(MPIRUN + ["-np", str(np_)] + sft_args(d, flags))
            check(rc == 0, f"{name}: exit 0 ({t:.1f} s)" + ("" if rc == 0 else "\n" + out[-3000:]))
            if rc != 0:
                continue
            got = steps(d)
            rel = abs(got[1]["loss"] - sft_single[1]["loss"]) / sft_single[1]["loss"]
            check(rel <= (1e-7 if "--sp" in flags else 0.0), f"{name}: step 1 loss as one process's "
                  f"(rel {rel:.1e}{', within 1e-7: sp composes the KDA state' if '--sp' in flags else ', bit for bit'})")
            compare_steps(name, sft_single, got, 1, 8)
            check(out.count("fine-tuned 8 steps") == 1 and "parallel: " in out, f"{name}: rank 0 reports once")
            ck = os.path.join(d, "checkpoints", "step-000008")
            check(os.path.exists(os.path.join(ck, "model.safetensors.index.json" if "--ep" in flags
                                              else "model.safetensors")), f"{name}: the final checkpoint is written")

    # 5. Bad layouts.
    for np_, flags, want in [(3, ["--ep", "3"], "--ep 3 does not divide num_experts 8"),
                             (2, ["--dp", "3"], "= 3 ranks, but this job has 2")]:
        d = f"{WORK}/bad{''.join(flags)}"
        rc, out, _ = run(MPIRUN + ["-np", str(np_)] + train_args(d, t20, flags), timeout=120)
        check(rc != 0 and want in out and not os.path.exists(d),
              f"{' '.join(flags)} on {np_} ranks: one error, nothing written" + ("" if rc != 0 and want in out else "\n" + out[-2000:]))

    # 9. GRPO under mpirun (--dp 2): each rank rolls out half of the step's groups with the sampling streams one
    # process gives them, so every step up to the first update has one process's rollouts: the same rewards,
    # successes and policy tokens exactly. The loss uses the engine's log-probs of the sampled tokens as the PPO
    # ratio's denominator, and the engine computes them in decode batches of 12 rollouts on one rank and 6 on two:
    # the BLAS picks its kernels by matrix size, so those log-probs agree only to f32 rounding, as the logged
    # engine-vs-trainer mismatch shows (~1e-6; the same with the code before the softplus gate, measured on one
    # model). A token's term A r (r = e^(logp - old)) moves by |A| r |d old| when old moves by d old <= the two
    # runs' largest mismatches summed; |A| <= sqrt(2) (advantages normalized within groups of 3), r <= 1.28
    # (clip-higher), and the loss is a mean of such terms: it agrees within 2 x (mismatch_a + mismatch_b), plus
    # 1e-9 of itself for the summation order. A wrong rollout, advantage or token would move it by O(1e-2).
    # Later steps start from weights whose gradients were summed in another order (~1e-7), where a sampled token
    # may flip: they are checked to run, not to agree.
    grpo_cfg = os.path.join(WORK, "grpo.json")
    with open(grpo_cfg, "w") as f:
        json.dump({"steps": 3, "prompts_per_step": 4, "group_size": 3, "eval_every": 1000, "eval_per_family": 0,
                   "checkpoint_every": 3, "max_tokens": 96, "max_reply_tokens": 48, "seed": 7, "kda_chunk": 32}, f)

    def grpo_args(out, extra=()):
        return [MYRIAD, "grpo", "--model", f"{WORK}/single", "--train-config", grpo_cfg, "--out", out, "--quiet",
                *extra]
    rc, out, _ = run(grpo_args(f"{WORK}/grpo1"))
    check(rc == 0, "grpo in one process" + ("" if rc == 0 else "\n" + out[-2000:]))
    rc2, out2, t = run(MPIRUN + ["-np", "2"] + grpo_args(f"{WORK}/grpo2", ["--dp", "2"]))
    check(rc2 == 0, f"grpo np 2 --dp 2: exit 0 ({t:.1f} s)" + ("" if rc2 == 0 else "\n" + out2[-3000:]))
    if rc == 0 and rc2 == 0:
        a, b = steps(f"{WORK}/grpo1"), steps(f"{WORK}/grpo2")
        check(sorted(a) == sorted(b) == [1, 2, 3], f"grpo np 2 --dp 2: steps {sorted(b)} logged once each")
        # Steps whose groups were all dropped (equal rewards) make no update: the weights are still the start's
        # up to the first step that trains, which must exist (or the comparison would be vacuous).
        first = next((k for k in sorted(a) if a[k]["policy_tokens"] > 0), None)
        check(first is not None, "grpo: some step trains (policy tokens > 0)")
        for k in range(1, (first or 0) + 1):
            same = all(a[k][f] == b[k][f] for f in ("rewards", "success", "policy_tokens", "groups_dropped",
                                                     "mean_calls", "violations"))
            check(same, f"grpo np 2 --dp 2: step {k}'s rollouts are one process's (rewards, success, policy "
                  "tokens, dropped groups)" + ("" if same else f"\n{a[k]}\n{b[k]}"))
            diff = abs(a[k]["loss"] - b[k]["loss"])
            bound = 2.0 * (a[k]["logprob_mismatch_max"] + b[k]["logprob_mismatch_max"]) + 1e-9 * abs(a[k]["loss"])
            check(diff <= bound, f"grpo np 2 --dp 2: step {k} loss within {bound:.1e} of one process's ({diff:.1e}; "
                  f"{a[k]['policy_tokens']} policy tokens)")
        check(out2.count("GRPO: 3 steps") == 1, "grpo np 2 --dp 2: rank 0 reports once")
        check(os.path.exists(os.path.join(f"{WORK}/grpo2", "checkpoints", "step-000003", "model.safetensors")),
              "grpo np 2 --dp 2: the final checkpoint is written")
    # GRPO under --ep 2 (one data-parallel block, the 8 experts split 4 + 4): both ranks roll out all 4 groups in
    # lockstep (their forwards exchange token copies), so step 1's rollouts are one process's exactly, and they
    # split the 12 sequences for the update (one pass of zero weight pads the rank with fewer kept sequences); the
    # loss within the bound above (a sum over two ranks' halves). The final checkpoint is sharded (each rank its
    # experts), and one process resumes from it for a fourth step (2 ranks -> 1).
    # Its config also evaluates (one held-out task per family, greedy) before step 1: rank 0's ep group runs the
    # episodes in lockstep, and the report and transcripts must be one process's (compared with a one-process run
    # stopped after that evaluation), wall-clock figures aside.
    grpo_ev = os.path.join(WORK, "grpo_ev.json")
    with open(grpo_cfg) as f:
        ev = json.load(f)
    ev["eval_per_family"] = 1
    with open(grpo_ev, "w") as f:
        json.dump(ev, f)

    def evals(run_dir):
        def untimed(x):
            if isinstance(x, dict):
                return {k: untimed(v) for k, v in x.items() if "seconds" not in k and "per_s" not in k}
            return [untimed(v) for v in x] if isinstance(x, list) else x
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        return [untimed(r) for r in recs if r["type"] in ("eval", "sample") and r["step"] == 0]
    rc_ev, out_ev, _ = run([MYRIAD, "grpo", "--model", f"{WORK}/single", "--train-config", grpo_ev, "--out",
                            f"{WORK}/grpo_ev1", "--quiet", "--stop-after", "0"])
    check(rc_ev == 0, "grpo evaluation in one process" + ("" if rc_ev == 0 else "\n" + out_ev[-2000:]))
    rc3, out3, t = run(MPIRUN + ["-np", "2"] + [MYRIAD, "grpo", "--model", f"{WORK}/single", "--train-config", grpo_ev,
                                                "--out", f"{WORK}/grpo_ep", "--quiet", "--ep", "2"])
    check(rc3 == 0, f"grpo np 2 --ep 2: exit 0 ({t:.1f} s)" + ("" if rc3 == 0 else "\n" + out3[-3000:]))
    if rc == 0 and rc3 == 0:
        a, c = steps(f"{WORK}/grpo1"), steps(f"{WORK}/grpo_ep")
        check(sorted(c) == [1, 2, 3], f"grpo np 2 --ep 2: steps {sorted(c)} logged once each")
        first = next((k for k in sorted(a) if a[k]["policy_tokens"] > 0), None)
        for k in range(1, (first or 0) + 1):
            same = all(a[k][f] == c[k][f] for f in ("rewards", "success", "policy_tokens", "groups_dropped",
                                                     "mean_calls", "violations", "groups_kept"))
            check(same, f"grpo np 2 --ep 2: step {k}'s rollouts are one process's" + ("" if same else
                                                                                     f"\n{a[k]}\n{c[k]}"))
            diff = abs(a[k]["loss"] - c[k]["loss"])
            bound = 2.0 * (a[k]["logprob_mismatch_max"] + c[k]["logprob_mismatch_max"]) + 1e-9 * abs(a[k]["loss"])
            check(diff <= bound, f"grpo np 2 --ep 2: step {k} loss within {bound:.1e} of one process's ({diff:.1e})")
        e1, e2 = evals(f"{WORK}/grpo_ev1"), evals(f"{WORK}/grpo_ep")
        check(len(e1) > 1 and e1 == e2, f"grpo np 2 --ep 2: the step-0 evaluation ({len(e2)} records: the report "
              "and its transcripts) is one process's" + ("" if e1 == e2 else f"\n{e1}\n{e2}"))
        check(out3.count("GRPO: 3 steps") == 1, "grpo np 2 --ep 2: rank 0 reports once")
        ck = os.path.join(f"{WORK}/grpo_ep", "checkpoints", "step-000003")
        check(os.path.exists(os.path.join(ck, "model.safetensors.index.json")) and
              os.path.exists(os.path.join(ck, "optimizer.safetensors.index.json")),
              "grpo np 2 --ep 2: the final checkpoint is sharded (model and optimizer indexes)")
        rc4, out4, _ = run([MYRIAD, "grpo", "--resume", f"{WORK}/grpo_ep", "--steps", "4", "--quiet"])
        check(rc4 == 0 and sorted(steps(f"{WORK}/grpo_ep")) == [1, 2, 3, 4],
              "grpo: one process resumes the --ep 2 run's sharded checkpoint for step 4" +
              ("" if rc4 == 0 else "\n" + out4[-2000:]))
    # GRPO under --sp 2 and --ep 2 x --sp 2 (4 ranks): every sp rank rolls out the block whole, so the rollouts are
    # one process's exactly; each trains on its half of every sequence (the state and latents of the first half
    # joined through the sequence-context seam), so the loss is a sum of two shards' shares whose log-probs round
    # differently from one whole forward (~1e-7): within the bound above, which counts each run's own mismatch
    # against the engine's log-probs (the sharded forward's included).
    for np_, flags in [(2, ["--sp", "2"]), (4, ["--ep", "2", "--sp", "2"])]:
        name = f"grpo np {np_} {' '.join(flags)}"
        d = f"{WORK}/grpo{''.join(flags)}"
        rc5, out5, t = run(MPIRUN + ["-np", str(np_)] + grpo_args(d, flags))
        check(rc5 == 0, f"{name}: exit 0 ({t:.1f} s)" + ("" if rc5 == 0 else "\n" + out5[-3000:]))
        if rc == 0 and rc5 == 0:
            a, c = steps(f"{WORK}/grpo1"), steps(d)
            first = next((k for k in sorted(a) if a[k]["policy_tokens"] > 0), None)
            for k in range(1, (first or 0) + 1):
                same = all(a[k][f] == c[k][f] for f in ("rewards", "success", "policy_tokens", "groups_dropped",
                                                         "groups_kept", "violations"))
                check(same, f"{name}: step {k}'s rollouts are one process's" + ("" if same else f"\n{a[k]}\n{c[k]}"))
                diff = abs(a[k]["loss"] - c[k]["loss"])
                bound = 2.0 * (a[k]["logprob_mismatch_max"] + c[k]["logprob_mismatch_max"]) + 1e-9 * abs(a[k]["loss"])
                check(diff <= bound, f"{name}: step {k} loss within {bound:.1e} of one process's ({diff:.1e})")
            check(out5.count("GRPO: 3 steps") == 1, f"{name}: rank 0 reports once")
    for np_, flags, want in [(3, ["--dp", "3"], "does not split evenly over --dp 3")]:
        d = f"{WORK}/grpo_bad{''.join(flags)}"
        rc, out, _ = run(MPIRUN + ["-np", str(np_)] + grpo_args(d, flags), timeout=120)
        check(rc != 0 and out.count(want) == 1 and not os.path.exists(d),
              f"grpo {' '.join(flags)} on {np_} ranks: one error, nothing written" + ("" if rc != 0 and want in out
                                                                                   else "\n" + out[-2000:]))

    # 10. Image-text training (configs/tiny-vl.json: vision tower, projector and text model) under --dp 2, --ep 2
    # and --sp 2: the records' batches (tokens and image patches) split by rank as text's are, the tower's gradients
    # summed with the rest; under --sp every rank encodes the sequence's images and places the rows its shard's
    # placeholders take (the 64-token sequences' shards cut the images' runs). Step 1 bit-identical to one process
    # (--sp: within rel 1e-7, the composed KDA state), then the rule of 1. The tokenizer the one-process run trained
    # on the records' text is given to the others.
    rc, out, _ = run([MYRIAD, "data", "shapes", "--out", f"{WORK}/shapes", "--train", "64", "--test", "4"])
    assert rc == 0, out
    vl_cfg = os.path.join(WORK, "vl.json")
    with open(vl_cfg, "w") as f:
        json.dump({"stages": [{"seq_len": 64, "steps": 6}], "batch_tokens": 256, "lr": 0.004, "warmup_steps": 2,
                   "eval_every": 1000, "eval_batches": 1, "task_eval_per_task": 0, "checkpoint_every": 6,
                   "log_every": 1, "kda_chunk": 32}, f)

    def vl_args(out, extra=()):
        return [MYRIAD, "train", "--config", os.path.join(SRC, "configs", "tiny-vl.json"), "--train-config", vl_cfg,
                "--data", f"{WORK}/shapes/train.jsonl", "--out", out, "--quiet", *extra]
    rc, out, _ = run(vl_args(f"{WORK}/vl1"))
    check(rc == 0, "image-text training in one process" + ("" if rc == 0 else "\n" + out[-2000:]))
    if rc == 0:
        vl_single = steps(f"{WORK}/vl1")
        for flags in (["--dp", "2"], ["--ep", "2"], ["--sp", "2"]):
            name = f"image-text np 2 {' '.join(flags)}"
            d = f"{WORK}/vl2{''.join(flags).replace('-', '')}"
            rc, out, t = run(MPIRUN + ["-np", "2"] + vl_args(d, flags + ["--tokenizer", f"{WORK}/vl1/tokenizer"]))
            check(rc == 0, f"{name}: exit 0 ({t:.1f} s)" + ("" if rc == 0 else "\n" + out[-3000:]))
            if rc != 0:
                continue
            got = steps(d)
            if "--sp" in flags:
                rel = abs(got[1]["loss"] - vl_single[1]["loss"]) / vl_single[1]["loss"]
                check(rel <= 1e-7, f"{name}: step 1 loss within rel 1e-7 ({rel:.1e})")
            else:
                check(got[1]["loss"] == vl_single[1]["loss"], f"{name}: step 1 loss bit-identical "
                      f"({got[1]['loss']!r} vs {vl_single[1]['loss']!r})")
            compare_steps(name, vl_single, got, 1, 6)

    # 6. Expert-parallel inference: a random model (varied tokens), sampled generation and perplexity (prefill and
    # token by token) on 1, 2 and 4 ranks; rank 0 prints, and prints what one process prints.
    init = f"{WORK}/init"
    rc, out, _ = run([MYRIAD, "init", "--config", CONFIG, "--out", init, "--seed", "3"])
    assert rc == 0, out
    shutil.copytree(f"{WORK}/prep/tokenizer", f"{init}/tokenizer")
    gen = [MYRIAD, "generate", "--model", init, "--prompt", "Once upon", "--max-tokens", "48", "--temperature", "1",
           "--seed", "7"]
    ev = [MYRIAD, "eval", "--model", init, "--data", f"{WORK}/prep/data", "--max-tokens", "2048", "--window", "256"]

    def stdout_of(cmd):
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), timeout=300)
        return p.returncode, p.stdout, p.stderr

    for what, cmd in [("generate", gen), ("eval", ev), ("eval --decode", ev + ["--decode"])]:
        rc, want, err = stdout_of(cmd)
        check(rc == 0 and want.strip(), f"{what}: one process" + ("" if rc == 0 else "\n" + err[-2000:]))
        for np_ in (2, 4):
            rc, got, err = stdout_of(MPIRUN + ["-np", str(np_)] + cmd + ["--ep", str(np_)])
            check(rc == 0 and got == want, f"{what} --ep {np_}: rank 0 prints exactly what one process prints"
                  + ("" if rc == 0 and got == want else f"\n{got[-500:]!r}\nvs\n{want[-500:]!r}\n{err[-1500:]}"))

    # 7. Expert-parallel serving: rank 0 serves HTTP, rank 1 its experts; the same completions (text and
    # logprobs, greedy and sampled) as a one-process server; SIGTERM ends both.
    def start_server(cmd):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env())
        SERVERS.append(p)
        port, t0, seen = None, time.time(), []
        while time.time() - t0 < 120:
            line = p.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.match(r"myriad serve: listening on http://127.0.0.1:(\d+)", line)  # rank 0's, not a replica's
            port = int(m.group(1)) if m else port
            if "ready:" in line:
                p.seen = "".join(seen)
                return p, port, ""
        p.seen = "".join(seen)
        return p, None, p.seen

    def complete(port, body):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"][0]

    one, port1, why1 = start_server([MYRIAD, "serve", "--model", init, "--port", "0"])
    two, port2, why2 = start_server(MPIRUN + ["-np", "2", MYRIAD, "serve", "--model", init, "--port", "0", "--ep", "2"])
    check(port1 is not None and port2 is not None, "serve: one process and --ep 2 ready" + why1[-1000:] + why2[-1000:])
    if port1 is not None and port2 is not None:
        for body in [{"model": "init", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "logprobs": 3},
                     {"model": "init", "prompt": "The", "max_tokens": 32, "temperature": 1.0, "seed": 11}]:
            a, b = complete(port1, body), complete(port2, body)
            check(a["text"] == b["text"] and a.get("logprobs") == b.get("logprobs"),
                  f"serve --ep 2: the same completion as one process (temperature {body['temperature']})"
                  + ("" if a == b else f"\n{a!r}\nvs\n{b!r}"))

    # 7b. Sequence-parallel serving: rank 0 serves, a long prompt is prefilled by both ranks (rank 0 the last
    # shard, then decoding from the state the shards left). The same greedy text as one process, logprobs within
    # 1e-4 (the composed KDA state is M S + S~ instead of one recurrence: f32 rounding, measured ~5e-7; a lost
    # state, halo or latent block moves them by O(0.1)), sampled text equal; /metrics counts the split prefills.
    # A prompt under --sp-min-tokens is prefilled on rank 0 alone, as before.
    three, port3, why3 = start_server(MPIRUN + ["-np", "2", MYRIAD, "serve", "--model", init, "--port", "0", "--sp",
                                                "2", "--sp-min-tokens", "64"])
    check(port3 is not None, "serve --sp 2 ready" + why3[-1000:])
    if port1 is not None and port3 is not None:
        story = " ".join(["Once upon a time a small boat sailed to the island where the old keeper lived."] * 12)
        for body in [{"model": "init", "prompt": story, "max_tokens": 24, "temperature": 0, "logprobs": 3},
                     {"model": "init", "prompt": "The" + story, "max_tokens": 32, "temperature": 1.0, "seed": 11},
                     {"model": "init", "prompt": "Once upon", "max_tokens": 8, "temperature": 0, "logprobs": 1}]:
            a, b = complete(port1, body), complete(port3, body)
            la, lb = (a.get("logprobs") or {}).get("token_logprobs", []), (b.get("logprobs") or {}).get(
                "token_logprobs", [])
            gap = max([abs(x - y) for x, y in zip(la, lb)] + [0.0])
            check(a["text"] == b["text"] and len(la) == len(lb) and gap < 1e-4,
                  f"serve --sp 2: the same completion as one process (temperature {body['temperature']}, "
                  f"{len(body['prompt'])} characters; logprobs within {gap:.2g})" + ("" if a["text"] == b["text"]
                                                                                     else f"\n{a!r}\nvs\n{b!r}"))
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port3}/metrics", timeout=30).read().decode()
        split = re.search(r"^myriad_sequence_parallel_prefills_total (\d+)", metrics, re.M)
        check(split is not None and int(split.group(1)) == 2,
              "serve --sp 2: the two long prompts were prefilled by both ranks, the short one by rank 0 ("
              + (split.group(0) if split else "no counter") + ")")
    # 7c. Data-parallel serving: rank 0 the front with its own engine, rank 1 an internal replica behind a random
    # key. A long request holds engine 0, so the next goes to the replica: each reply is one process's exactly
    # (every engine decodes one sequence, as the one-process server did), streamed or not; a bad request is
    # refused at the front; a client leaving a forwarded stream cancels it on the replica.
    four, port4, why4 = start_server(MPIRUN + ["-np", "2", MYRIAD, "serve", "--model", init, "--port", "0", "--dp",
                                               "2"])
    check(port4 is not None, "serve --dp 2 ready" + why4[-1000:])
    if port1 is not None and port4 is not None:
        hold = {"model": "init", "prompt": "Once upon a time", "max_tokens": 1900, "temperature": 0, "logprobs": 2,
                "ignore_eos": True}
        second = {"model": "init", "prompt": "The sea", "max_tokens": 120, "temperature": 1.0, "seed": 5,
                  "logprobs": 1, "ignore_eos": True}

        def engines():
            text = urllib.request.urlopen(f"http://127.0.0.1:{port4}/metrics", timeout=30).read().decode()
            return [int(float(v)) for v in re.findall(r'^myriad_data_parallel_requests_total\{engine="\d"\} (\S+)',
                                                      text, re.M)]

        def side_by_side(first, then, stream):
            out = {}
            def run_one(key, body):
                if stream:
                    req = urllib.request.Request(f"http://127.0.0.1:{port4}/v1/completions",
                                                 data=json.dumps(dict(body, stream=True)).encode(),
                                                 headers={"Content-Type": "application/json"})
                    sse = urllib.request.urlopen(req, timeout=120).read().decode()
                    chunks = [json.loads(x[6:]) for x in sse.split("\n") if x.startswith("data: {")]
                    out[key] = {"text": "".join(c["choices"][0]["text"] for c in chunks if c["choices"])}
                else:
                    out[key] = complete(port4, body)
            a = threading.Thread(target=run_one, args=("first", first))
            a.start()
            time.sleep(0.1)
            run_one("then", then)
            a.join()
            return out["first"], out["then"]

        alone = [complete(port1, hold), complete(port1, second)]
        got = side_by_side(hold, second, False)
        check(all(g == w for g, w in zip(got, alone)) and engines() == [1, 1],
              f"serve --dp 2: the replica's reply and the front's own are one process's exactly (requests per "
              f"engine {engines()})")
        got = side_by_side(hold, second, True)
        check([g["text"] for g in got] == [w["text"] for w in alone] and engines() == [2, 2],
              f"serve --dp 2: the same replies streamed (requests per engine {engines()})")
        def status_of(port, body):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30)
                return 200
            except urllib.error.HTTPError as e:
                return e.code

        status = status_of(port4, dict(second, max_tokens=-1))
        check(status == 400 and engines() == [2, 2], f"serve --dp 2: a bad request is refused at the front ({status})")
        rport = None
        for line in four.seen.splitlines():
            m = re.search(r"replica 1\): listening on http://127.0.0.1:(\d+)", line)
            rport = int(m.group(1)) if m else rport
        if rport is not None:
            status = status_of(rport, second)
            check(status == 401, f"serve --dp 2: the replica refuses requests without rank 0's key ({status})")
            h = threading.Thread(target=complete, args=(port4, hold))
            h.start()
            time.sleep(0.1)
            conn = http.client.HTTPConnection("127.0.0.1", port4, timeout=30)
            conn.request("POST", "/v1/completions", json.dumps(dict(second, max_tokens=1900, stream=True)),
                         {"Content-Type": "application/json"})
            conn.getresponse().read(100)
            conn.close()
            cancelled, t0 = 0, time.time()
            while time.time() - t0 < 10 and cancelled == 0:
                text = urllib.request.urlopen(f"http://127.0.0.1:{rport}/metrics", timeout=30).read().decode()
                m = re.search(r"^myriad_requests_cancelled_total (\S+)", text, re.M)
                cancelled = int(float(m.group(1))) if m else 0
                time.sleep(0.1)
            h.join()
            check(cancelled == 1, f"serve --dp 2: a client leaving a forwarded stream cancels it on the replica "
                  f"({cancelled} cancelled there)")
        else:
            check(False, "serve --dp 2: the replica's address was not printed")
    for p in (one, two, three, four):
        p.send_signal(signal.SIGTERM)
    for name, p in (("one process", one), ("--ep 2", two), ("--sp 2", three), ("--dp 2", four)):
        try:
            p.communicate(timeout=30)
            check(True, f"serve {name}: ended on SIGTERM")
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, f"serve {name}: still running 30 s after SIGTERM")

    check.finish("parallel_train")


if __name__ == "__main__":
    try:
        main()
    finally:
        for server in SERVERS:  # one an exception left running (the normal path ends each with SIGTERM)
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
