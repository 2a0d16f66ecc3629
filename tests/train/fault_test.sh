#!/usr/bin/env bash
# Faults a training run must survive (issue 18), each against an uninterrupted run A:
#  1. Damage: each file of the latest checkpoint truncated, and (separately) one bit flipped in it: resuming and
#     `myriad inspect` refuse with one error naming the file (exit 1, never a crash), and `myriad generate` on the
#     checkpoint refuses too.
#  2. Disk full: a save that cannot be written (RLIMIT_FSIZE below the weights' size: write() fails with EFBIG as
#     on a full disk; and, where this process may mount one, a real tmpfs that fills up with ENOSPC): one clear
#     error, the previous checkpoint intact and still `latest`, and the run resumes to A's losses bit for bit.
#  3. kill -9 at random moments of a run that saves every step, TRIALS times (default 100): after every kill the
#     newest checkpoint verifies and loads, and the runs resumed through the kills end with the uninterrupted
#     run's losses.
#  4. NaN injected into an activation, a gradient and a weight (run in the order 4, 3).
# usage: fault_test.sh MYRIAD REPO_ROOT WORK_DIR [TRIALS]
set -uo pipefail
bin="$1"; root="$2"; work="$3"; trials="${4:-100}"
rm -rf "$work"; mkdir -p "$work"
cat >"$work/train.json" <<'JSON'
{"stages": [{"seq_len": 64, "steps": 12}], "batch_tokens": 256, "lr": 0.003, "warmup_steps": 3,
 "eval_every": 1000, "eval_batches": 1, "task_eval_per_task": 1, "task_eval_max_new_tokens": 2,
 "checkpoint_every": 4, "keep_checkpoints": 3, "log_every": 1000, "seed": 5}
JSON
sed 's/"checkpoint_every": 4/"checkpoint_every": 1/; s/"steps": 12/"steps": 60/' "$work/train.json" >"$work/every.json"
export MYRIAD_THREADS=2
cfg="$root/configs/tiny.json"
fail() { echo "FAIL: $*"; exit 1; }
losses() {  # step<TAB>loss of the step records
  python3 -c "
import json, sys
seen = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:  # a line torn by a kill
        continue
    if r.get('type') == 'step': seen[r['step']] = repr(r['loss'])
for s in sorted(seen): print(s, seen[s])
" "$1/metrics.jsonl"
}
# Runs a command that must fail cleanly: exit status 1 (the CLI's error exit; a crash is >= 128) and output
# naming $1.
expect_refusal() {
  local what="$1"; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  [[ $rc == 1 ]] || fail "$what: expected exit 1, got $rc: $(tail -3 <<<"$out")"
  grep -q -- "$what" <<<"$out" || fail "$what: the error does not name it: $(tail -3 <<<"$out")"
  echo "  refused ($what): $(grep -m1 -i "error\|checksum\|damaged\|truncated" <<<"$out" | cut -c1-150)"
}

"$bin" train --config "$cfg" --train-config "$work/train.json" --quiet --out "$work/A" >/dev/null 2>&1 ||
  fail "uninterrupted run failed"
losses "$work/A" >"$work/A.losses"

# 1. Damage: each file of a copy of A stopped at step 8, truncated to half and then bit-flipped.
"$bin" train --config "$cfg" --train-config "$work/train.json" --quiet --out "$work/base" --stop-after 8 \
  >/dev/null 2>&1 || fail "the run to step 8 failed"
ck="checkpoints/$(cat "$work/base/checkpoints/latest")"
[[ -f "$work/base/$ck/checksums.json" ]] || fail "the checkpoint has no checksums.json"
echo "1. damaged files of $ck"
for f in model.safetensors optimizer.safetensors trainer_state.json config.json tokenizer/tokenizer.model \
         checksums.json; do
  for damage in truncate flip; do
    rm -rf "$work/D"; cp -r "$work/base" "$work/D"
    python3 - "$work/D/$ck/$f" "$damage" <<'PY'
import os, sys
path, damage = sys.argv[1], sys.argv[2]
size = os.path.getsize(path)
if damage == "truncate":
    os.truncate(path, size // 2)
else:  # one bit in the middle: the file keeps its size and, for JSON, usually still parses
    with open(path, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)[0]
        f.seek(size // 2)
        f.write(bytes([b ^ 0x01]))
PY
    name=$(basename "$f")
    [[ "$f" == checksums.json ]] && name=checksums.json
    expect_refusal "$name" "$bin" train --config "$cfg" --train-config "$work/train.json" --quiet --resume "$work/D"
    expect_refusal "$name" "$bin" inspect "$work/D/$ck"
    if [[ "$f" == model.safetensors || "$f" == config.json || "$f" == tokenizer/tokenizer.model ]]; then
      expect_refusal "$name" "$bin" generate --model "$work/D/$ck" --prompt "In the" --max-tokens 2
    fi
  done
done
echo "ok: every truncated or bit-flipped checkpoint file is refused, naming the file"

# 2. Disk full during the save at step 12.
size=$(stat -c %s "$work/base/$ck/model.safetensors")
rm -rf "$work/F"; cp -r "$work/base" "$work/F"
out=$(trap '' XFSZ; ulimit -f $((size / 2048)); "$bin" train --config "$cfg" --train-config "$work/train.json" \
      --quiet --resume "$work/F" 2>&1); rc=$?
[[ $rc == 1 ]] || fail "a save past the file-size limit: expected exit 1, got $rc: $(tail -2 <<<"$out")"
grep -qi "too large\|no space\|cannot write\|write" <<<"$out" || fail "the disk-full error is unclear: $out"
echo "2. disk full (EFBIG): $(grep -m1 -i "error" <<<"$out" | cut -c1-160)"
[[ "checkpoints/$(cat "$work/F/checkpoints/latest")" == "$ck" ]] || fail "latest moved after a failed save"
"$bin" inspect "$work/F/$ck" >/dev/null 2>&1 || fail "the previous checkpoint no longer verifies"
leftover=$(find "$work/F/checkpoints" -mindepth 1 -maxdepth 1 -name '*.tmp*' | wc -l)
"$bin" train --config "$cfg" --train-config "$work/train.json" --quiet --resume "$work/F" >/dev/null 2>&1 ||
  fail "resuming after the failed save failed"
diff <(losses "$work/F" | awk '$1 > 8') <(awk '$1 > 8' "$work/A.losses") >/dev/null ||
  fail "the run resumed after a failed save does not reproduce A's losses"
echo "ok: a failed save left $ck as latest ($leftover staging dirs left for the next save to clear); resumed to A's losses"

# The other writers under the same limit: quantize, convert, prune (its output directory) and data prepare. Each
# gives one error and leaves nothing at its destination (a file or directory there would read as a result).
src="$work/base/$ck"
limited() { (trap '' XFSZ; ulimit -f $((size / 4096)); "$@"); }
for cmd in "quantize --in $src --out $work/out-q8 --type q8" "convert --in $src --out $work/out-conv.safetensors" \
           "prune --in $src --calib $work/base/corpus --keep 50% --out $work/out-pruned" \
           "data prepare --tokenizer $src/tokenizer --data $work/base/corpus --out $work/out-data --shard-tokens 4000000"; do
  read -r -a argv <<<"$cmd"
  out=$(limited "$bin" "${argv[@]}" 2>&1); rc=$?
  dest=$(grep -o -- "--out [^ ]*" <<<"$cmd" | cut -d' ' -f2)
  [[ $rc == 1 ]] || fail "myriad ${argv[0]} past the file-size limit: expected exit 1, got $rc: $(tail -2 <<<"$out")"
  [[ ! -e "$dest" ]] || [[ -z "$(find "$dest" -type f 2>/dev/null)" ]] ||
    fail "myriad ${argv[0]} left a partial output at $dest: $(find "$dest" -type f | head -3)"
  echo "   ${argv[0]}: $(grep -m1 -i "error" <<<"$out" | cut -c1-150)"
done
echo "ok: quantize, convert, prune and data prepare each fail with one error and leave no partial output"

mnt="$work/tmpfs"; mkdir -p "$mnt"
if mount -t tmpfs -o size=$(( $(du -sb "$work/base" | cut -f1) + size / 2 )) tmpfs "$mnt" 2>/dev/null; then
  cp -r "$work/base" "$mnt/run"
  out=$("$bin" train --config "$cfg" --train-config "$work/train.json" --quiet --resume "$mnt/run" 2>&1); rc=$?
  [[ $rc == 1 ]] || { umount "$mnt"; fail "a save on a full tmpfs: expected exit 1, got $rc: $(tail -2 <<<"$out")"; }
  echo "   disk full (ENOSPC, tmpfs): $(grep -m1 -i "error" <<<"$out" | cut -c1-160)"
  [[ "checkpoints/$(cat "$mnt/run/checkpoints/latest")" == "$ck" ]] || { umount "$mnt"; fail "latest moved on ENOSPC"; }
  "$bin" inspect "$mnt/run/$ck" >/dev/null 2>&1 || { umount "$mnt"; fail "the checkpoint broke on ENOSPC"; }
  umount "$mnt"
  echo "ok: a full tmpfs: one error, the previous checkpoint intact and latest"
else
  echo "   (no tmpfs: this process may not mount one; the RLIMIT_FSIZE case above covers the write-failure path)"
fi

# 4. NaN injected (MYRIAD_FAULT_NAN, src/train/fault_injection.h) into an activation and into a gradient: that
# step is skipped and counted and the run finishes; into a weight for good: every step after is skipped, the run
# stops after max_consecutive_skips naming the last good checkpoint, which is still `latest` and resumes.
echo "4. NaN injection"
skipped() {  # the last step record's skipped count, and whether every loss other than the skipped ones is finite
  python3 -c "
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '\"step\"' in l]
recs = [r for r in recs if r.get('type') == 'step']
print(recs[-1]['skipped'], recs[-1]['step'], sum(1 for r in recs if r['loss'] is None or not math.isfinite(r['loss'])))
" "$1/metrics.jsonl"
}
for kind in activation gradient; do
  MYRIAD_FAULT_NAN="$kind@5" "$bin" train --config "$cfg" --train-config "$work/train.json" --quiet \
    --out "$work/nan-$kind" >/dev/null 2>&1 || fail "a NaN $kind at step 5 stopped the run"
  read -r n last nonfinite <<<"$(skipped "$work/nan-$kind")"
  [[ "$n" == 1 && "$last" == 12 ]] || fail "a NaN $kind: expected 1 skipped step and 12 steps, got $n skipped, $last"
  echo "   $kind@5: 1 step skipped and counted ($nonfinite non-finite loss logged), the run finished its 12 steps"
done
out=$(MYRIAD_FAULT_NAN="weight@5" "$bin" train --config "$cfg" --train-config "$work/train.json" --quiet \
      --out "$work/nan-weight" 2>&1); rc=$?
[[ $rc == 1 ]] || fail "a NaN weight: expected exit 1 after the skips, got $rc"
grep -q "training stopped: .*consecutive.*step-000004" <<<"$out" || fail "a NaN weight: unclear stop: $out"
[[ "$(cat "$work/nan-weight/checkpoints/latest")" == step-000004 ]] ||
  fail "a NaN weight: latest is $(cat "$work/nan-weight/checkpoints/latest"), not the last good step-000004"
echo "   weight@5: $(grep -o "training stopped: [^.]*" <<<"$out" | head -1)"
"$bin" train --config "$cfg" --train-config "$work/train.json" --quiet --resume "$work/nan-weight" >/dev/null 2>&1 ||
  fail "resuming from the last good checkpoint after a NaN weight failed"
diff <(losses "$work/nan-weight" | awk '$1 > 4') <(awk '$1 > 4' "$work/A.losses") >/dev/null ||
  fail "the resume from the last good checkpoint does not reproduce A's losses"
echo "ok: NaN activation and gradient skipped and counted; a NaN weight stopped the run naming step-000004, which" \
  "resumed to A's losses"

# 3. kill -9 at random moments of a run that checkpoints every step. The moments are drawn from a window that
# starts just before the resumed process's first step (its start-up time, measured here), so that most kills land
# among the steps and their saves; a run that reaches its last step is compared with the uninterrupted one (E) and
# started again.
echo "3. $trials kills during a run that saves every step"
K="$work/K"
kills=0
rounds=0
steps=()
start_k() {
  rm -rf "$K"
  "$bin" train --config "$cfg" --train-config "$work/every.json" --quiet --out "$K" --stop-after 2 >/dev/null 2>&1 ||
    fail "the every-step run's start failed"
}
check_k() {  # the whole loss curve of K (every step, from whichever process ran it last) equals E's
  diff <(losses "$K") "$work/E.losses" >/dev/null ||
    fail "after $kills kills the run's losses differ from the uninterrupted run's"
  rounds=$((rounds + 1))
}
"$bin" train --config "$cfg" --train-config "$work/every.json" --quiet --out "$work/E" >/dev/null 2>&1 ||
  fail "the uninterrupted every-step run failed"
losses "$work/E" >"$work/E.losses"
final=$(printf 'step-%06d' "$(wc -l <"$work/E.losses")")
start_k
t0=$(date +%s.%N)
"$bin" train --config "$cfg" --train-config "$work/every.json" --quiet --resume "$K" --stop-after 3 >/dev/null 2>&1
startup=$(python3 -c "print(max(0.2, ($(date +%s.%N) - $t0) * 0.8))")
for t in $(seq "$trials"); do
  "$bin" train --config "$cfg" --train-config "$work/every.json" --quiet --resume "$K" >/dev/null 2>&1 &
  pid=$!
  sleep "$(python3 -c "import random; random.seed($t); print(round($startup + random.uniform(0, 0.8), 3))")"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" 2>/dev/null
  latest=$(cat "$K/checkpoints/latest")
  "$bin" inspect "$K/checkpoints/$latest" >/dev/null 2>&1 ||
    fail "trial $t: the newest checkpoint $latest does not verify after kill -9"
  steps+=("$((10#${latest#step-}))")
  if [[ "$latest" == "$final" ]]; then
    check_k
    start_k
  fi
done
"$bin" train --config "$cfg" --train-config "$work/every.json" --quiet --resume "$K" >/dev/null 2>&1 ||
  fail "the final resume failed"
check_k
echo "ok: $kills kills (-9) at random moments; latest after each: ${steps[*]}"
echo "ok: the newest checkpoint verified after every kill; $rounds runs resumed through the kills ended with the" \
  "uninterrupted run's losses, bit for bit"
echo "PASS"
