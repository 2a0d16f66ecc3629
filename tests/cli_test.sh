#!/usr/bin/env bash
# CLI smoke test: every subcommand answers --help; bad input gives one clear error line and a non-zero exit.
# usage: tests/cli_test.sh PATH/TO/myriad REPO_ROOT
set -uo pipefail
bin="$1"
root="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
check() {  # check NAME EXPECTED_STATUS CMD...
  local name="$1" want="$2"
  shift 2
  "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: $name: exit $got, want $want"; sed 's/^/  | /' "$work/err" | head -5; fails=$((fails + 1))
  else
    echo "ok:   $name"
  fi
}
one_error_line() {  # the last command printed exactly one line on stderr, naming $1
  local n
  n=$(wc -l <"$work/err")
  if [[ "$n" != 1 ]] || ! grep -q -- "$1" "$work/err"; then
    echo "FAIL: expected one stderr line mentioning '$1', got $n lines:"; sed 's/^/  | /' "$work/err"; fails=$((fails + 1))
  fi
}

check "myriad --help" 0 "$bin" --help
cmds=$(awk '/^commands:/{f=1;next} f && !NF {exit} f {print $1}' "$work/out")
[[ -n "$cmds" ]] || { echo "FAIL: --help lists no commands"; fails=$((fails + 1)); }
for c in $cmds; do
  check "myriad $c --help" 0 "$bin" "$c" --help
  grep -q "^usage: myriad $c" "$work/out" || { echo "FAIL: $c --help has no usage line"; fails=$((fails + 1)); }
done
check "no command" 2 "$bin"
check "unknown command" 2 "$bin" frobnicate
check "unknown option" 1 "$bin" inspect --frobnicate x
one_error_line "unknown option --frobnicate"
check "bad --cache-dtype" 1 "$bin" serve --model "$work" --cache-dtype f16
one_error_line "cache-dtype f16: must be one of f32, bf16, q8"
check "bad --threads" 1 "$bin" version --threads many
one_error_line "threads"
check "bad MYRIAD_THREADS" 1 env MYRIAD_THREADS=abc "$bin" version
one_error_line "MYRIAD_THREADS"
check "bad MYRIAD_GEMM" 1 env MYRIAD_GEMM=fastest "$bin" version
one_error_line "MYRIAD_GEMM=fastest: must be auto, onednn or openblas"
# OpenBLAS told to run its generic kernels (as Debian's 0.3.21 does by itself on CPUs newer than it) and chosen by
# hand: it runs, but says so once, and `version` names the kernel as generic.
check "generic OpenBLAS is never silent" 0 env OPENBLAS_CORETYPE=Prescott MYRIAD_GEMM=openblas "$bin" version
if grep -q -E "avx2|avx512f" "$work/out"; then  # a CPU for which Prescott is generic
  grep -q "warning: OpenBLAS runs its Prescott kernels" "$work/err" || { echo "FAIL: no warning for a generic OpenBLAS"; fails=$((fails + 1)); }
  grep -q "Prescott (generic for this CPU)" "$work/out" || { echo "FAIL: version does not name the generic kernel"; fails=$((fails + 1)); }
fi
check "version names the GEMM backend and the ISA paths" 0 "$bin" version
for w in "commit:" "build:" "cpu:" "kernels:" "gemm:" "threads:" "cuda:" "mpi:"; do
  grep -q "$w" "$work/out" || { echo "FAIL: version prints no '$w' line"; fails=$((fails + 1)); }
done
# A run directory is a model for every command that takes --model (its latest checkpoint), logits included.
"$bin" init --config "$root/configs/tiny.json" --out "$work/run/checkpoints/step-000001" >/dev/null 2>&1
echo step-000001 >"$work/run/checkpoints/latest"
echo "{}" >"$work/run/checkpoints/step-000001/trainer_state.json"
check "logits --model RUN" 0 "$bin" logits --model "$work/run" --tokens 1,2,3 --out "$work/logits.safetensors"
check "quantize --model RUN" 0 "$bin" quantize --model "$work/run" --out "$work/run-q8" --type q8
check "quantize --model and --in" 1 "$bin" quantize --model "$work/run" --in "$work/run" --out "$work/x" --type q8
one_error_line "not both"
printf 'garbage!!' >"$work/bad.safetensors"
check "inspect bad file" 1 "$bin" inspect "$work/bad.safetensors"
one_error_line "bad.safetensors"
check "inspect missing file" 1 "$bin" inspect "$work/nope.safetensors"
one_error_line "nope.safetensors"
# A checkpoint directory whose config breaks a rule: the error names the field.
mkdir -p "$work/ckpt"
python3 - "$work/ckpt/model.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<2f", 1.0, 2.0))
PY
sed 's/"num_experts_per_token": *[0-9]*/"num_experts_per_token": 999/' "$root/configs/tiny.json" >"$work/ckpt/config.json"
check "inspect checkpoint with bad config" 1 "$bin" inspect "$work/ckpt"
grep -q "num_experts_per_token" "$work/err" || { echo "FAIL: config error does not name the field"; cat "$work/err"; fails=$((fails + 1)); }
cp "$root/configs/tiny.json" "$work/ckpt/config.json"
check "inspect good checkpoint" 0 "$bin" inspect "$work/ckpt"
grep -q "w" "$work/out" || { echo "FAIL: inspect does not list tensor w"; fails=$((fails + 1)); }
# myriad train: bad input is one error line, exit 1, and no run directory left behind.
no_run_left() {  # $1: the --out that must not exist
  [[ ! -e "$1" ]] || { echo "FAIL: $1 was left behind"; ls -la "$1" | head -5; fails=$((fails + 1)); }
}
check "train: missing data" 1 "$bin" train --config "$root/configs/tiny.json" --data "$work/nothere.txt" \
  --out "$work/run1" --quiet
one_error_line "nothere.txt"
no_run_left "$work/run1"
mkdir -p "$work/notext"
check "train: a directory with no text" 1 "$bin" train --config "$root/configs/tiny.json" --data "$work/notext" \
  --out "$work/run2" --quiet
one_error_line "holds no text files"
no_run_left "$work/run2"
printf '{"stages": [{"seq_len": 4096, "steps": 2}], "batch_tokens": 4096}' >"$work/long.train.json"
check "train: stage longer than the context" 1 "$bin" train --config "$root/configs/tiny.json" \
  --train-config "$work/long.train.json" --out "$work/run3" --quiet
one_error_line "max_position_embeddings"
no_run_left "$work/run3"
touch "$work/a_file"
check "train: unwritable output" 1 "$bin" train --config "$root/configs/tiny.json" --out "$work/a_file/run" --quiet
one_error_line "a_file/run"
check "train: resume from something that is not a run" 1 "$bin" train --config "$root/configs/small.json" \
  --resume "$work/ckpt" --out "$work/run5" --quiet
one_error_line "no checkpoint"
no_run_left "$work/run5"
# The long-context grid at every stage's end (train.json longctx_eval): one "longctx" record per stage, drawn by
# `myriad report`; `myriad eval longctx` on the run's checkpoint; its bad grids are one error line.
printf '{"stages": [{"seq_len": 64, "steps": 2}, {"seq_len": 128, "steps": 2}], "batch_tokens": 256,
  "eval_every": 100, "eval_batches": 1, "task_eval_per_task": 0, "checkpoint_every": 100,
  "longctx_eval": {"lengths": [256, 512], "depths": [0, 100], "samples": 1}}' >"$work/lc.train.json"
check "train with longctx_eval" 0 "$bin" train --config "$root/configs/tiny.json" --train-config "$work/lc.train.json" \
  --out "$work/lc" --quiet
n=$(grep -c '"type":"longctx"' "$work/lc/metrics.jsonl")
[[ "$n" == 2 ]] || { echo "FAIL: $n longctx records, want 2 (one per stage)"; fails=$((fails + 1)); }
check "report of a run with longctx grids" 0 "$bin" report "$work/lc"
grep -q "<h2>Long context</h2>" "$work/lc/report.html" || { echo "FAIL: no long-context section"; fails=$((fails + 1)); }
check "eval longctx" 0 "$bin" eval longctx --model "$work/lc" --lengths 300 --depths 0,100 --samples 1 \
  --json "$work/lc.json" --svg "$work/lc.svg" --html "$work/lc.html"
for f in lc.json lc.svg lc.html; do [[ -s "$work/$f" ]] || { echo "FAIL: eval longctx wrote no $f"; fails=$((fails + 1)); }; done
printf '{"stages": [{"seq_len": 64, "steps": 1}], "longctx_eval": {"lengths": [40]}}' >"$work/lc-short.train.json"
check "train: longctx_eval length too short for the facts" 1 "$bin" train --config "$root/configs/tiny.json" \
  --train-config "$work/lc-short.train.json" --out "$work/lc-short" --quiet
one_error_line "longctx_eval.lengths"
no_run_left "$work/lc-short"
# Sequence state files: a prompt's state saved by one `generate`, loaded by the next (same greedy answer, the
# document not prefilled again); another model's state and a prompt too short for a snapshot are refused.
head -c 1500 "$root/../shared/data/tinyshakespeare.txt" >"$work/doc.txt" 2>/dev/null ||
  for i in $(seq 60); do printf 'The river ran past the stone mill and on to the sea. ' >>"$work/doc.txt"; done
{ cat "$work/doc.txt"; printf '\nAnd then'; } >"$work/docq.txt"
check "generate --save-state" 0 "$bin" generate --model "$work/lc" --prompt-file "$work/doc.txt" --max-tokens 2 \
  --prefix-every 64 --save-state "$work/doc.state"
grep -q "saved the state of the prompt's first" "$work/err" || { echo "FAIL: no saved-state line"; fails=$((fails + 1)); }
check "generate --load-state" 0 "$bin" generate --model "$work/lc" --prompt-file "$work/docq.txt" --max-tokens 6 \
  --prefix-every 64 --load-state "$work/doc.state"
cp "$work/out" "$work/resumed.out"
grep -q "prompt tokens ([1-9][0-9]* from the prefix cache)" "$work/err" ||
  { echo "FAIL: the loaded state was not used"; sed 's/^/  | /' "$work/err"; fails=$((fails + 1)); }
check "generate without the state" 0 "$bin" generate --model "$work/lc" --prompt-file "$work/docq.txt" --max-tokens 6 \
  --prefix-every 0
cmp -s "$work/out" "$work/resumed.out" || { echo "FAIL: the resumed answer differs"; fails=$((fails + 1)); }
# Speculative decoding from the CLI: a draft distilled from the run (its teacher), then generate with it and with
# n-gram drafts: the greedy text equals the plain one; the statistics line says what was accepted.
printf '{"stages": [{"seq_len": 64, "steps": 3}], "batch_tokens": 256, "eval_every": 100, "eval_batches": 1,
  "checkpoint_every": 100}' >"$work/draft.train.json"
check "distill a draft" 0 "$bin" distill --teacher "$work/lc" --config "$root/configs/tiny.json" \
  --train-config "$work/draft.train.json" --generated-share 0.5 --out "$work/draft" --quiet
[[ -s "$work/draft/distill.json" ]] || { echo "FAIL: distill wrote no distill.json"; fails=$((fails + 1)); }
check "generate plain" 0 "$bin" generate --model "$work/lc" --prompt-file "$work/docq.txt" --max-tokens 24 \
  --prefix-every 0
cp "$work/out" "$work/plain.out"
for d in "--draft-model $work/draft" "--draft ngram"; do
  # shellcheck disable=SC2086
  check "generate $d" 0 "$bin" generate --model "$work/lc" --prompt-file "$work/docq.txt" --max-tokens 24 \
    --prefix-every 0 $d --spec-tokens 3
  cmp -s "$work/out" "$work/plain.out" || { echo "FAIL: generate $d: the greedy text differs"; fails=$((fails + 1)); }
  grep -q "speculation (.*): [0-9]* verifies" "$work/err" ||
    { echo "FAIL: generate $d printed no speculation line"; sed 's/^/  | /' "$work/err"; fails=$((fails + 1)); }
done
check "generate --draft model without a model" 1 "$bin" generate --model "$work/lc" --prompt x --draft model
one_error_line "--draft-model"
check "distill without a teacher" 1 "$bin" distill --config "$root/configs/tiny.json" --out "$work/d2"
one_error_line "--teacher"
no_run_left "$work/d2"
# Block-sparse MLA trained from the CLI with passkey samples mixed in; the mix's and the bench's refusals.
printf '{"stages": [{"seq_len": 256, "steps": 2}, {"seq_len": 1024, "steps": 1}], "batch_tokens": 1024,
  "eval_every": 100, "eval_batches": 1, "task_eval_per_task": 0, "checkpoint_every": 100,
  "longctx_mix": {"tasks": ["passkey"], "fraction": 0.5}}' >"$work/mix.train.json"
check "train sparse MLA with longctx_mix" 0 "$bin" train --config "$root/configs/tiny-longctx.json" \
  --train-config "$work/mix.train.json" --out "$work/mix" --quiet
printf '{"stages": [{"seq_len": 64, "steps": 1}], "longctx_mix": {"fraction": 0.5}}' >"$work/mix-short.train.json"
check "train: longctx_mix stage too short for a sample" 1 "$bin" train --config "$root/configs/tiny.json" \
  --train-config "$work/mix-short.train.json" --out "$work/mix-short" --quiet
one_error_line "longctx_mix"
no_run_left "$work/mix-short"
check "generate --load-state of another model" 1 "$bin" generate --model "$work/mix" --prompt "x" --max-tokens 1 \
  --load-state "$work/doc.state"
one_error_line "the state of another model"
check "generate --save-state with no snapshot" 1 "$bin" generate --model "$work/lc" --prompt "Hi" --max-tokens 1 \
  --save-state "$work/none.state"
one_error_line "no snapshot of the prompt"
check "bench longctx" 0 "$bin" bench longctx --config "$root/configs/tiny-longctx.json" --context 4K --at 1K,4K --decode 2 --dense --json "$work/blc.json"
[[ -s "$work/blc.json" ]] || { echo "FAIL: bench longctx wrote no JSON"; fails=$((fails + 1)); }
check "bench longctx: --at past the context" 1 "$bin" bench longctx --config "$root/configs/tiny-longctx.json" --context 4K --at 8K
one_error_line "--context 4096"
check "eval longctx: length over the context" 1 "$bin" eval longctx --model "$work/lc" --lengths 4K
one_error_line "max_position_embeddings 2048"
check "eval longctx: depth over 100" 1 "$bin" eval longctx --model "$work/lc" --depths 0,120
one_error_line "0..100"
check "eval longctx: unknown task" 1 "$bin" eval longctx --model "$work/lc" --task needle
one_error_line "passkey, multikey, vartrack"
# Images: a shape-question set, a VLM trained on it for a few steps (stage 1 the projector alone), its answers
# scored by generation; the refusals.
check "data shapes" 0 "$bin" data shapes --out "$work/shapes" --train 60 --test 12
[[ $(wc -l <"$work/shapes/train.jsonl") == 60 && $(wc -l <"$work/shapes/test.jsonl") == 12 ]] ||
  { echo "FAIL: data shapes wrote the wrong number of records"; fails=$((fails + 1)); }
printf '{"stages": [{"seq_len": 64, "steps": 2, "freeze": ["text_model", "vision_tower"]}, {"seq_len": 64, "steps": 2}], "batch_tokens": 128, "eval_every": 4, "task_eval_per_task": 1}' >"$work/vl.train.json"
check "train a VLM on image-text records" 0 "$bin" train --config "$root/configs/tiny-vl.json" \
  --train-config "$work/vl.train.json" --data "$work/shapes/train.jsonl" --out "$work/vl" --quiet
grep -q '"type":"eval"' "$work/vl/metrics.jsonl" || { echo "FAIL: the VLM run logged no eval"; fails=$((fails + 1)); }
check "train a VLM: stop after 2 steps" 0 "$bin" train --config "$root/configs/tiny-vl.json" \
  --train-config "$work/vl.train.json" --data "$work/shapes/train.jsonl" --out "$work/vl2" --quiet --stop-after 2
check "resume the VLM run without --data (its records file is recorded)" 0 "$bin" train \
  --config "$root/configs/tiny-vl.json" --resume "$work/vl2" --quiet
[[ -d "$work/vl2/checkpoints/step-000004" ]] || { echo "FAIL: the resumed VLM run did not reach step 4"; fails=$((fails + 1)); }
# The same records prepared (images decoded once into a store): a run on the directory, stopped and resumed.
check "data prepare: image-text records" 0 "$bin" data prepare --data "$work/shapes/train.jsonl" --out "$work/shapes-p"
[[ -f "$work/shapes-p/images.safetensors" && $(wc -l <"$work/shapes-p/image_text.jsonl") == 60 ]] ||
  { echo "FAIL: data prepare wrote no image store"; fails=$((fails + 1)); }
check "data prepare: the output exists" 1 "$bin" data prepare --data "$work/shapes/train.jsonl" --out "$work/shapes-p"
one_error_line "--force"
check "train a VLM on a prepared directory: stop after 2 steps" 0 "$bin" train --config "$root/configs/tiny-vl.json" \
  --train-config "$work/vl.train.json" --data "$work/shapes-p" --out "$work/vl3" --quiet --stop-after 2
check "resume the prepared-directory run" 0 "$bin" train --config "$root/configs/tiny-vl.json" --resume "$work/vl3" --quiet
[[ -d "$work/vl3/checkpoints/step-000004" ]] || { echo "FAIL: the prepared run did not reach step 4"; fails=$((fails + 1)); }
check "eval images" 0 "$bin" eval images --model "$work/vl" --data "$work/shapes/test.jsonl" --json "$work/vl.json"
grep -q '"questions": 12' "$work/vl.json" || { echo "FAIL: eval images did not score 12 questions"; fails=$((fails + 1)); }
# eval text: every pretraining task scored on 4 held-out prompts, 2 of them shown, each marked by its own answer.
check "eval text" 0 "$bin" eval text --model "$work/lc" --per-task 4 --show 2 --json "$work/text.json"
python3 - "$work/text.json" <<'PY' || { echo "FAIL: eval text's report"; fails=$((fails + 1)); }
import json, sys
j = json.load(open(sys.argv[1]))
assert sorted(j["tasks"]) == ["arithmetic", "copy", "recall", "reverse"], j["tasks"].keys()
for name, t in j["tasks"].items():
    assert t["total"] == 4 and 0 <= t["correct"] <= 4 and abs(t["accuracy"] - t["correct"] / 4) < 1e-12, (name, t)
    assert len(t["samples"]) == 2, (name, t)
    for s in t["samples"]:
        assert s["correct"] == (s["got"] == s["want"]), (name, s)
PY
check "train: image records for a text-only model" 1 "$bin" train --config "$root/configs/tiny.json" \
  --data "$work/shapes/train.jsonl" --out "$work/vl-text" --quiet
one_error_line "no vision tower"
no_run_left "$work/vl-text"
printf '{"stages": [{"seq_len": 64, "steps": 1, "freeze": ["text_model", "vision_tower", "mm_projector"]}]}' >"$work/vl-all.train.json"
check "train: a stage that freezes everything" 1 "$bin" train --config "$root/configs/tiny-vl.json" \
  --train-config "$work/vl-all.train.json" --data "$work/shapes/train.jsonl" --out "$work/vl-all" --quiet
one_error_line "nothing would train"
check "eval images on a text-only model" 1 "$bin" eval images --model "$work/lc" --data "$work/shapes/test.jsonl"
one_error_line "no vision tower"
# Videos: motion clips (frames inline), a few steps of training on them, scored by generation; generate --video.
check "data motion" 0 "$bin" data motion --out "$work/motion" --train 40 --test 8 --frames 5
[[ $(wc -l <"$work/motion/train.jsonl") == 40 && $(grep -c '"videos"' "$work/motion/test.jsonl") == 8 ]] ||
  { echo "FAIL: data motion wrote the wrong records"; fails=$((fails + 1)); }
check "train a VLM on video records" 0 "$bin" train --config "$root/configs/tiny-vl.json" \
  --train-config "$work/vl.train.json" --data "$work/motion/train.jsonl" --out "$work/vv" --quiet
check "eval images on video questions" 0 "$bin" eval images --model "$work/vv" --data "$work/motion/test.jsonl" \
  --json "$work/vv.json"
grep -q '"questions": 8' "$work/vv.json" || { echo "FAIL: eval images did not score 8 video questions"; fails=$((fails + 1)); }
check "data prepare: records with videos" 1 "$bin" data prepare --data "$work/motion/train.jsonl" --out "$work/motion-p"
one_error_line "stores images only"
check "generate --video on a text-only model" 1 "$bin" generate --model "$work/lc" --prompt hi --video "$work/x.gif"
one_error_line "no vision tower"
check "data mnist without files" 1 "$bin" data mnist --out "$work/mnist"
one_error_line "--idx DIR"
echo "$fails failure(s)"
exit $((fails > 0))
