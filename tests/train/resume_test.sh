#!/usr/bin/env bash
# Resumption is exact, and a kill during a save loses nothing.
#  1. A: an uninterrupted run.
#  2. B: the same run killed (SIGKILL) once it has a checkpoint, then resumed with --resume: every step after the
#     checkpoint has the same loss as A's, bit for bit (metrics.jsonl prints doubles with round-trip precision).
#  3. C: a run whose second save is interrupted (MYRIAD_FAULT_IN_SAVE=1 exits between writing the weights and
#     the rename, as a kill would): the previous checkpoint is still `latest`, loads, and resuming finishes
#     with A's losses.
# usage: resume_test.sh MYRIAD REPO_ROOT WORK_DIR
set -uo pipefail
bin="$1"; root="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"
cat >"$work/train.json" <<'JSON'
{"stages": [{"seq_len": 64, "steps": 10}, {"seq_len": 128, "steps": 6}], "batch_tokens": 256, "lr": 0.003,
 "warmup_steps": 3, "eval_every": 1000, "eval_batches": 1, "task_eval_per_task": 1, "task_eval_max_new_tokens": 2,
 "checkpoint_every": 4, "keep_checkpoints": 2, "log_every": 1000, "seed": 5}
JSON
export MYRIAD_THREADS=2
train() { "$bin" train --config "$root/configs/tiny.json" --train-config "$work/train.json" --quiet "$@"; }
losses() {  # step<TAB>loss for step records with step > $2
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get('type') == 'step' and r['step'] > int(sys.argv[2]): print(r['step'], repr(r['loss']))
" "$1/metrics.jsonl" "$2" | sort -n -u
}
fail() { echo "FAIL: $*"; exit 1; }

train --out "$work/A" >/dev/null 2>&1 || fail "uninterrupted run failed"

# B: kill -9 after the first checkpoint appears (the data and corpus are generated first, so wait for it).
# Started directly (not through the `train` function) so that $! is myriad itself, not a subshell: killing a
# subshell would leave myriad running on, racing the resume.
"$bin" train --config "$root/configs/tiny.json" --train-config "$work/train.json" --quiet --out "$work/B" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -f "$work/B/checkpoints/latest" ]] && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[[ -f "$work/B/checkpoints/latest" ]] || fail "run B never wrote a checkpoint"
ck=$(cat "$work/B/checkpoints/latest")
at=$((10#${ck#step-}))
echo "killed run B after checkpoint $ck"
# Records after the checkpoint may exist from before the kill: keep only the resumed run's by truncating them.
python3 - "$work/B/metrics.jsonl" "$at" <<'PY'
import json, sys
path, at = sys.argv[1], int(sys.argv[2])
def step_of(line):
    try:
        return json.loads(line).get("step", 0)
    except ValueError:  # a line torn by the kill
        return None
keep = [l for l in open(path) if step_of(l) is not None and step_of(l) <= at]
open(path, "w").writelines(keep)
PY
train --resume "$work/B" >"$work/B.resume.log" 2>&1 || { tail -3 "$work/B.resume.log"; fail "resume of B failed"; }
diff <(losses "$work/A" "$at") <(losses "$work/B" "$at") >/dev/null || {
  diff <(losses "$work/A" "$at") <(losses "$work/B" "$at") | head; fail "resumed losses differ from the uninterrupted run"; }
echo "ok: resumed from $ck, $(losses "$work/B" "$at" | wc -l) later steps identical to the uninterrupted run"

# C: the save at step 8 is interrupted; step-000004 must survive as latest and resume exactly.
train --out "$work/C" --stop-after 4 >/dev/null 2>&1 || fail "run C (first 4 steps) failed"
[[ "$(cat "$work/C/checkpoints/latest")" == "step-000004" ]] || fail "run C has no checkpoint at step 4"
MYRIAD_FAULT_IN_SAVE=1 train --resume "$work/C" >/dev/null 2>&1
rc=$?
[[ $rc == 3 ]] || fail "the fault-injected save should exit with 3, got $rc"
[[ "$(cat "$work/C/checkpoints/latest")" == "step-000004" ]] || fail "latest moved during an interrupted save"
ls -a "$work/C/checkpoints" | grep -q "\.tmp-" || fail "the interrupted save left no temp directory (was it reached?)"
python3 - "$work/C/metrics.jsonl" 4 <<'PY'
import json, sys
path, at = sys.argv[1], int(sys.argv[2])
def step_of(line):
    try:
        return json.loads(line).get("step", 0)
    except ValueError:  # a line torn by the kill
        return None
keep = [l for l in open(path) if step_of(l) is not None and step_of(l) <= at]
open(path, "w").writelines(keep)
PY
train --resume "$work/C" >/dev/null 2>&1 || fail "resume after the interrupted save failed"
ls -a "$work/C/checkpoints" | grep -q "\.tmp-" && fail "the stale temp directory was not cleaned up"
diff <(losses "$work/A" 4) <(losses "$work/C" 4) >/dev/null || fail "losses after the interrupted save differ"
echo "ok: an interrupted save left step-000004 loadable; resuming from it reproduced the uninterrupted losses"

# A checkpoint from another config is refused with one clear error.
sed 's/"hidden_size": 64/"hidden_size": 32/' "$root/configs/tiny.json" >"$work/other.json"
out=$("$bin" train --config "$work/other.json" --train-config "$work/train.json" --resume "$work/A" --quiet 2>&1)
[[ $? != 0 ]] && grep -q "expected shape" <<<"$out" || fail "resuming with another config should fail naming a shape: $out"
echo "ok: a checkpoint from another config is refused: $(tail -1 <<<"$out" | cut -c1-160)"

# D: --init starts a new run (step 1, a new schedule and optimizer) from A's last weights. Same seed, so its first
# batch is A's first: A's first step saw random weights, D's sees trained ones, so D's first loss is well below A's
# (identical if the weights were not carried). Refused with --resume, and from a checkpoint of another config.
train --out "$work/D" --init "$work/A" --stop-after 1 >"$work/D.log" 2>&1 || { tail -3 "$work/D.log"; fail "--init run failed"; }
grep -q '"type":"init"' "$work/D/metrics.jsonl" || fail "the --init run logged no init record"
# Every record is one the report reads (it counts and shows a record without a numeric step as malformed).
rep=$("$bin" report "$work/D" 2>&1) || fail "report of the --init run failed: $rep"
grep -q "malformed" <<<"$rep" && fail "the --init run's metrics.jsonl has a line the report skips: $rep"
first() { python3 -c "
import json, sys
print(min((r['step'], r['loss']) for r in map(json.loads, open(sys.argv[1])) if r.get('type') == 'step')[1])" "$1/metrics.jsonl"; }
a1=$(first "$work/A"); d1=$(first "$work/D")
python3 -c "import sys; a, d = map(float, sys.argv[1:]); sys.exit(0 if d < a - 0.5 else 1)" "$a1" "$d1" ||
  fail "the --init run's first loss $d1 is not below the fresh run's $a1: were the weights carried?"
echo "ok: --init from A: first loss $d1 (a fresh run's: $a1)"
out=$(train --out "$work/E" --init "$work/A" --resume "$work/A" 2>&1)
[[ $? != 0 ]] && grep -q "give one of them" <<<"$out" || fail "--init with --resume should be refused: $out"
out=$("$bin" train --config "$work/other.json" --train-config "$work/train.json" --init "$work/A" --out "$work/F" --quiet 2>&1)
[[ $? != 0 ]] && grep -q "expected shape" <<<"$out" || fail "--init from another config should fail naming a shape: $out"
[[ ! -e "$work/F" ]] || fail "a refused --init left a run directory"
echo "ok: --init refused with --resume and from another config"
