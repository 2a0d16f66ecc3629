#!/usr/bin/env bash
# The README's "Train on your own text", run as written: the five commands between its <!-- own-text:begin --> and
# <!-- own-text:end --> markers, read from README.md itself (so the README and this test cannot drift apart), on a
# small text with a 20-step training config added to `myriad train` (the README's default ladder takes 20 minutes).
# Each step's output is checked: the tokenizer, the shards, a checkpoint, the report, generated text.
#   usage: tests/docs/own_text.sh PATH/TO/myriad TEXT_FILE SCRATCH_DIR
#   e.g.   head -c 200000 ../shared/data/tinyshakespeare.txt > /tmp/t.txt
#          tests/docs/own_text.sh build/release/myriad /tmp/t.txt /tmp/own_text      (about 30 s on 2 cores)
set -euo pipefail
if [[ $# -ne 3 ]]; then
  sed -n '7,8p' "$0" >&2
  exit 2
fi
bin=$(realpath "$1")
text=$(realpath "$2")
scratch=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
readme=$root/README.md
fail() { echo "FAIL: $*" >&2; exit 1; }

rm -rf "$scratch" && mkdir -p "$scratch" && scratch=$(realpath "$scratch")
mapfile -t cmds < <(awk '/<!-- own-text:begin -->/ {on = 1; next} /<!-- own-text:end -->/ {on = 0} on && /^myriad /' \
                    "$readme")
want=("myriad tokenizer train " "myriad data prepare " "myriad train " "myriad report " "myriad generate ")
[[ ${#cmds[@]} -eq ${#want[@]} ]] ||
  fail "README.md's own-text block holds ${#cmds[@]} myriad commands, this test expects ${#want[@]}: ${want[*]}"
for i in "${!want[@]}"; do
  [[ "${cmds[$i]}" == "${want[$i]}"* ]] || fail "README.md's own-text command $((i + 1)) is '${cmds[$i]}', expected '${want[$i]}...'"
done

# The only addition: a short schedule for `myriad train` (one stage of 20 steps of 2048 tokens).
cat >"$scratch/few.train.json" <<'EOF'
{"comment": "tests/docs/own_text.sh: 20 steps instead of the config's own ladder",
 "stages": [{"seq_len": 256, "steps": 20}], "batch_tokens": 2048, "lr": 0.003, "warmup_steps": 5,
 "eval_every": 10, "eval_batches": 4, "task_eval_per_task": 0, "checkpoint_every": 10, "log_every": 5}
EOF

# The README's commands run from the scratch directory: `myriad` is the binary under test, mytext.txt the text,
# configs/ the repository's; runs/ lands in the scratch directory.
run() {  # run STEP_NUMBER
  local cmd=${cmds[$1]} q_bin q_text q_configs
  printf -v q_bin '%q' "$bin"
  printf -v q_text '%q' "$text"
  printf -v q_configs '%q' "$root/configs/"
  cmd="$q_bin ${cmd#myriad }"
  cmd=${cmd//mytext.txt/$q_text}
  cmd=${cmd//configs\//$q_configs}
  [[ $1 -eq 2 ]] && cmd+=" --train-config $scratch/few.train.json"
  echo "--- step $(($1 + 1)): ${cmds[$1]}"
  local t0=$SECONDS
  (cd "$scratch" && eval "$cmd") >"$scratch/step$(($1 + 1)).out" 2>"$scratch/step$(($1 + 1)).err" ||
    { tail -20 "$scratch/step$(($1 + 1)).err" >&2; fail "step $(($1 + 1)) exited non-zero: ${cmds[$1]}"; }
  echo "    ok in $((SECONDS - t0)) s"
}
nonempty() { [[ -s "$scratch/$1" ]] || fail "$2: $1 is missing or empty"; }

start=$SECONDS
run 0
nonempty runs/mytext-tok/tokenizer.model "tokenizer train"
nonempty runs/mytext-tok/tokenizer.json "tokenizer train"

run 1
nonempty runs/mytext-data/meta.json "data prepare"
nonempty runs/mytext-data/train-00000.bin "data prepare"
nonempty runs/mytext-data/val-00000.bin "data prepare"

run 2
nonempty runs/mytext/metrics.jsonl "train"
nonempty runs/mytext/checkpoints/latest "train"
latest=$(cat "$scratch/runs/mytext/checkpoints/latest")
nonempty "runs/mytext/checkpoints/$latest/model.safetensors" "train"
grep -q '"type":"eval"' "$scratch/runs/mytext/metrics.jsonl" || fail "train: no evaluation record in metrics.jsonl"

run 3
nonempty runs/mytext/report.html "report"
grep -q "<svg" "$scratch/runs/mytext/report.html" || fail "report: report.html holds no chart"

run 4
generated=$(grep -o '[0-9]* generated' "$scratch/step5.err" | head -1 | cut -d' ' -f1)
[[ -n "$generated" && "$generated" -gt 0 ]] || fail "generate: no tokens generated (stderr: $(tail -1 "$scratch/step5.err"))"
[[ $(tr -d '[:space:]' <"$scratch/step5.out" | wc -c) -gt 6 ]] || fail "generate: the text holds no more than the prompt"
echo "PASS: the README's five own-text commands in $((SECONDS - start)) s ($generated tokens generated)"
