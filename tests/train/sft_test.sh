#!/usr/bin/env bash
# `myriad agent demos` -> `myriad sft` -> `myriad eval tasks`, end to end on a tiny model, and SFT's resumption:
#  1. a 12-step SFT run A, uninterrupted;
#  2. run B stopped after 6 steps (checkpointed), then --resume: steps 7-12 have A's losses bit for bit;
#  3. bad input: a malformed conversation file is one error naming the file and line, exit != 0, and no run
#     directory is left behind; a model directory that is not a run is refused;
#  4. eval tasks writes its JSON (every family, rates in [0, 1]) and HTML;
#  5. GRPO on run A: 4 steps uninterrupted (C) and 2 + --resume 2 (D) give the same losses and rewards bit for bit;
#     with refill_rounds (dynamic sampling) runs F and G the same, refills only adding groups; a bad GRPO config
#     is one error naming the field.
# usage: sft_test.sh MYRIAD REPO_ROOT WORK_DIR
set -uo pipefail
bin="$1"; root="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"
export MYRIAD_THREADS=2
fail() { echo "FAIL: $*"; exit 1; }
cat >"$work/pre.json" <<'JSON'
{"stages": [{"seq_len": 64, "steps": 4}], "batch_tokens": 128, "eval_every": 4, "eval_batches": 1,
 "task_eval_per_task": 2, "task_eval_max_new_tokens": 8, "checkpoint_every": 1000, "log_every": 1000}
JSON
cat >"$work/sft.json" <<'JSON'
{"stages": [{"seq_len": 256, "steps": 12}], "batch_tokens": 512, "lr": 0.002, "warmup_steps": 2,
 "eval_every": 6, "eval_batches": 1, "task_eval_per_task": 0, "checkpoint_every": 6, "log_every": 1000, "seed": 3}
JSON
"$bin" train --config "$root/configs/tiny.json" --train-config "$work/pre.json" --out "$work/pre" --quiet \
  >/dev/null 2>&1 || fail "pretraining the tiny model failed"
"$bin" agent demos --out "$work/demos.jsonl" --n 120 --seed 1 >/dev/null || fail "agent demos failed"
sft() { "$bin" sft --train-config "$work/sft.json" --agent-eval 1 --quiet "$@"; }
losses() {
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get('type') == 'step' and r['step'] > int(sys.argv[2]): print(r['step'], repr(r['loss']))
" "$1/metrics.jsonl" "$2" | sort -n -u
}
sft --model "$work/pre" --data "$work/demos.jsonl" --out "$work/A" >"$work/A.log" 2>&1 || { tail -5 "$work/A.log"; fail "SFT run A failed"; }
python3 - "$work/A" <<'PY' || fail "run A's records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
steps = [r for r in recs if r["type"] == "step"]
evals = [r for r in recs if r["type"] == "eval"]
assert len(steps) == 12, len(steps)
assert all("agent" in e and 0 <= e["agent"]["success"] <= 1 for e in evals), evals
assert evals[-1]["val_loss"] < evals[0]["val_loss"], (evals[0]["val_loss"], evals[-1]["val_loss"])
meta = json.load(open(sys.argv[1] + "/sft.json"))
assert meta["train_conversations"] + meta["val_conversations"] == 120, meta
print("ok: run A, val loss %.3f -> %.3f" % (evals[0]["val_loss"], evals[-1]["val_loss"]))
PY
sft --model "$work/pre" --data "$work/demos.jsonl" --out "$work/B" --stop-after 6 >/dev/null 2>&1 || fail "run B (6 steps)"
sft --resume "$work/B" >"$work/B.log" 2>&1 || { tail -5 "$work/B.log"; fail "resume of B failed"; }
diff <(losses "$work/A" 6) <(losses "$work/B" 6) >/dev/null || {
  diff <(losses "$work/A" 6) <(losses "$work/B" 6) | head; fail "resumed SFT losses differ"; }
echo "ok: resumed SFT, $(losses "$work/B" 6 | wc -l) later steps identical"
# A damaged sft.json (a number where the model's path belongs) is one error naming the file and the field, not a
# bare JSON type_error.
cp -r "$work/B" "$work/B-damaged"
python3 -c "
import json, sys
m = json.load(open(sys.argv[1])); m['model'] = 5; json.dump(m, open(sys.argv[1], 'w'))" "$work/B-damaged/sft.json"
out=$(sft --resume "$work/B-damaged" 2>&1); rc=$?
[[ $rc != 0 && "$out" == *"B-damaged/sft.json: model = 5"* && "$out" != *"type_error"* ]] ||
  fail "a damaged sft.json: $out"
rm -rf "$work/B-damaged"
# With a quarter of the rows from the pretraining shards: resumes bit for bit too, and logs the text loss.
sft --model "$work/pre" --data "$work/demos.jsonl" --out "$work/M1" --pretrain-data "$work/pre/data" --pretrain-mix 0.25 \
  >/dev/null 2>&1 || fail "SFT with a pretraining mix"
sft --model "$work/pre" --data "$work/demos.jsonl" --out "$work/M2" --pretrain-data "$work/pre/data" --pretrain-mix 0.25 \
  --stop-after 6 >/dev/null 2>&1 || fail "SFT with a pretraining mix (6 steps)"
sft --resume "$work/M2" >/dev/null 2>&1 || fail "resume of the mixed SFT"
diff <(losses "$work/M1" 6) <(losses "$work/M2" 6) >/dev/null || fail "resumed mixed SFT losses differ"
diff <(losses "$work/M1" 0) <(losses "$work/A" 0) >/dev/null && fail "the pretraining mix changed nothing"
grep -q '"pretrain_val_loss"' "$work/M1/metrics.jsonl" || fail "no pretraining text loss in the mixed run's evals"
echo "ok: SFT with a pretraining mix resumes bit for bit"

head -3 "$work/demos.jsonl" >"$work/bad.jsonl"
echo '{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{nope"}}]}]}' >>"$work/bad.jsonl"
out=$(sft --model "$work/pre" --data "$work/bad.jsonl" --out "$work/bad" 2>&1); rc=$?
[[ $rc != 0 ]] || fail "a malformed conversation file was accepted"
[[ "$out" == *"bad.jsonl:4:"*"messages[0].tool_calls[0].function.arguments"* ]] || fail "unclear error: $out"
[[ ! -e "$work/bad" ]] || fail "a refused run left $work/bad behind"
out=$(sft --model "$work" --data "$work/demos.jsonl" --out "$work/bad2" 2>&1); rc=$?
[[ $rc != 0 ]] || fail "a model directory without checkpoints was accepted"
out=$(sft --model "$work/pre" --tokenizer "$work/no-such-tokenizer" --data "$work/demos.jsonl" --out "$work/bad3" 2>&1)
rc=$?
[[ $rc != 0 && "$out" == *"no-such-tokenizer"* ]] || fail "sft --tokenizer with a missing path: $out"
[[ ! -e "$work/bad3" ]] || fail "a refused run left $work/bad3 behind"
out=$("$bin" grpo --model "$work/pre" --tokenizer "$work/no-such-tokenizer" --out "$work/bad4" 2>&1); rc=$?
[[ $rc != 0 && "$out" == *"no-such-tokenizer"* ]] || fail "grpo --tokenizer with a missing path: $out"
echo "ok: bad input refused ($(echo "$out" | head -1 | cut -c1-100))"

"$bin" eval tasks --model "$work/A" --per-family 1 --json "$work/ev.json" --html "$work/ev.html" >/dev/null 2>&1 ||
  fail "eval tasks failed"
python3 - "$work/ev.json" <<'PY' || fail "eval tasks JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert set(j["families"]) == {"price", "arith", "date", "delete", "total", "total_eur"}, j["families"].keys()
for f in j["families"].values():
    assert f["tasks"] == 1 and 0 <= f["success"] <= 1 and 0 <= f["pass_at_k"] <= 1, f
assert j["transcripts"], "no transcripts"
PY
grep -q "<table>" "$work/ev.html" || fail "no table in the HTML report"
# The pretraining tasks as served equal myriad train's own evaluation of the same weights: the same held-out
# prompts (seed 0 + 99, its task seed) and the same greedy answers.
"$bin" eval tasks --model "$work/pre" --per-family 1 --text-tasks 2 --seed 99 --json "$work/ev-pre.json" \
  >/dev/null 2>&1 || fail "eval tasks on the pretrained model failed"
python3 - "$work/ev-pre.json" "$work/pre/metrics.jsonl" <<'PY' || fail "eval tasks' text tasks differ from the trainer's"
import json, sys
j = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2])]
evals = [r for r in recs if "tasks" in r]
assert evals, "the trainer logged no task evaluation"
t = evals[-1]
assert j["text_tasks"] == t["tasks"], (j["text_tasks"], t["tasks"])
mine = [(s["prompt"], s["got"], s["want"]) for s in j["text_task_samples"]]
theirs = [(r["prompt"], r["text"], r["want"]) for r in recs if r["type"] == "sample" and r["step"] == t["step"]]
assert len(mine) == 4, mine
assert mine == theirs, (mine, theirs)
PY
echo "ok: eval tasks"

cat >"$work/grpo.json" <<'JSON'
{"steps": 4, "prompts_per_step": 2, "group_size": 3, "eval_every": 2, "eval_per_family": 1, "checkpoint_every": 2,
 "max_tokens": 96, "max_reply_tokens": 48, "seed": 7}
JSON
grpo() { "$bin" grpo --train-config "$work/grpo.json" --quiet "$@"; }
grpo --model "$work/A" --out "$work/C" >"$work/C.log" 2>&1 || { tail -5 "$work/C.log"; fail "GRPO run C failed"; }
grpo --model "$work/A" --out "$work/D" --stop-after 2 >/dev/null 2>&1 || fail "GRPO run D (2 steps)"
grpo --resume "$work/D" >"$work/D.log" 2>&1 || { tail -5 "$work/D.log"; fail "resume of GRPO run D failed"; }
grpo_steps() {
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get('type') == 'step' and r['step'] > 2: print(r['step'], repr(r['loss']), repr(r['rewards']['total']), r['policy_tokens'])
" "$1/metrics.jsonl" | sort -n -u
}
[[ $(grpo_steps "$work/C" | wc -l) == 2 ]] || fail "GRPO run C logged $(grpo_steps "$work/C" | wc -l) steps after 2"
diff <(grpo_steps "$work/C") <(grpo_steps "$work/D") >/dev/null || {
  diff <(grpo_steps "$work/C") <(grpo_steps "$work/D"); fail "resumed GRPO differs"; }
python3 - "$work/C" <<'PY' || fail "GRPO records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
steps = [r for r in recs if r["type"] == "step"]
for r in steps:
    for k in ("completion", "efficiency", "safety", "length", "total"):
        assert k in r["rewards"], r
    assert 0 <= r["clip_fraction"] <= 1 and r["logprob_mismatch_mean"] < 1e-2, r
    assert r["groups_dropped"] <= r["groups"], r
    # per family: every rolled-out episode once (kept and dropped groups of 3), the same success overall
    fam = r["families"]
    assert sum(f["episodes"] for f in fam.values()) == 3 * (r["groups_kept"] + r["groups_dropped"]), r
    assert abs(sum(f["episodes"] * f["success"] for f in fam.values()) / sum(f["episodes"] for f in fam.values())
               - r["success"]) < 1e-9, r
assert any(r["type"] == "eval" and "agent" in r for r in recs)
PY
# Dynamic sampling: refill_rounds rolls out new prompts in place of dropped groups; still resumed bit for bit.
python3 -c "
import json, sys
c = json.load(open(sys.argv[1])); c['refill_rounds'] = 2
json.dump(c, open(sys.argv[2], 'w'))" "$work/grpo.json" "$work/grpo-refill.json"
grpo_refill() { "$bin" grpo --train-config "$work/grpo-refill.json" --quiet "$@"; }
grpo_refill --model "$work/A" --out "$work/F" >"$work/F.log" 2>&1 || { tail -5 "$work/F.log"; fail "GRPO run F failed"; }
grpo_refill --model "$work/A" --out "$work/G" --stop-after 2 >/dev/null 2>&1 || fail "GRPO run G (2 steps)"
grpo_refill --resume "$work/G" >"$work/G.log" 2>&1 || { tail -5 "$work/G.log"; fail "resume of GRPO run G failed"; }
diff <(grpo_steps "$work/F") <(grpo_steps "$work/G") >/dev/null || {
  diff <(grpo_steps "$work/F") <(grpo_steps "$work/G"); fail "resumed GRPO with refills differs"; }
python3 - "$work/C" "$work/F" <<'PY' || fail "GRPO refill records"
import json, sys
def steps(d):
    return {r["step"]: r for r in map(json.loads, open(d + "/metrics.jsonl")) if r["type"] == "step"}
plain, refill = steps(sys.argv[1]), steps(sys.argv[2])
for s, r in refill.items():
    assert 1 <= r["rollout_rounds"] <= 3, r
    assert r["groups_kept"] <= r["groups"], r
    # another round only after a dropped group; fewer groups than asked only when the rounds ran out
    assert r["groups_dropped"] >= r["rollout_rounds"] - 1, r
    assert r["groups_kept"] == r["groups"] or r["rollout_rounds"] == 3, r
    assert "groups_kept" in plain[s] and plain[s]["rollout_rounds"] == 1, plain[s]
# Step 1 starts from the same weights and its first round is the plain run's: refills only add groups.
assert refill[1]["groups_kept"] >= plain[1]["groups_kept"], (refill[1], plain[1])
assert refill[1]["groups_kept"] == plain[1]["groups_kept"] or refill[1]["rollout_rounds"] > 1
PY
# A damaged grpo.json: a missing start checkpoint and one of the wrong type, each one error naming the file.
for bad in "del m['model_checkpoint']" "m['model_checkpoint'] = [1]"; do
  rm -rf "$work/D-damaged"; cp -r "$work/D" "$work/D-damaged"
  python3 -c "
import json, sys
m = json.load(open(sys.argv[1])); $bad; json.dump(m, open(sys.argv[1], 'w'))" "$work/D-damaged/grpo.json"
  out=$(grpo --resume "$work/D-damaged" 2>&1); rc=$?
  [[ $rc != 0 && "$out" == *"D-damaged/grpo.json"*"model_checkpoint"* && "$out" != *"type_error"* ]] ||
    fail "a damaged grpo.json ($bad): $out"
done
rm -rf "$work/D-damaged"
echo '{"refill_rounds": 17}' >"$work/bad_grpo.json"
out=$("$bin" grpo --model "$work/A" --out "$work/E" --train-config "$work/bad_grpo.json" 2>&1); rc=$?
[[ $rc != 0 && "$out" == *"refill_rounds"* ]] || fail "a bad GRPO refill_rounds: $out"
echo '{"group_size": 1}' >"$work/bad_grpo.json"
out=$("$bin" grpo --model "$work/A" --out "$work/E" --train-config "$work/bad_grpo.json" 2>&1); rc=$?
[[ $rc != 0 && "$out" == *"group_size"* ]] || fail "a bad GRPO config: $out"
echo "ok: GRPO resumes bit for bit (with refills too); refills only add groups; bad configs refused"
rm -rf "$work"
