#!/usr/bin/env bash
# make demo-vision: a small vision-language model (configs/tiny-vl.json: tiny's text model and a 2-block vision
# tower) trained from scratch on the built-in shape scenes (counts, colours, shapes, places; `myriad data shapes`),
# stage 1 the projector alone and then everything (configs/tiny-vl.train.json), then asked about held-out scenes:
# its generated answers next to the truth, and the accuracy per question type. Everything lands in runs/vision.
set -euo pipefail
bin=./build/release/myriad
out=${1:-runs/vision}
mkdir -p "$out"
"$bin" data shapes --out "$out/shapes" --train 6000 --test 400
"$bin" train --config configs/tiny-vl.json --data "$out/shapes/train.jsonl" --out "$out/run" --force
echo "--- held-out scenes: the model's answers (greedy) next to the truth ---"
"$bin" eval images --model "$out/run" --data "$out/shapes/test.jsonl" --show 12 --json "$out/eval.json"
echo "--- done: $out/run (checkpoints, metrics.jsonl), $out/eval.json; ask it yourself:"
echo "    $bin chat --model $out/run --temperature 0   then  /image PATH.png  and a question"
