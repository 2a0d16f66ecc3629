#!/usr/bin/env bash
# make demo-video: short videos. The built-in motion clips (`myriad data motion`: a square of one of four colours
# moving left, right, up or down over 4 frames of 28 x 28) as video questions; configs/mnist-vl.json's model (a
# 4-block tower at patch 7, tiny's text model) trained from scratch on them (configs/motion-vl.train.json: the
# projector alone, then everything), then asked about held-out clips: answers by generation next to the truth, and
# the accuracy per question type. "which way" needs the frames in order: their average (what the merge sees)
# is the same streak for left and right. Everything lands in runs/video.
set -euo pipefail
bin=./build/release/myriad
out=${1:-runs/video}
mkdir -p "$out"
"$bin" data motion --out "$out/data" --train 8000 --test 400
start=$(date +%s.%N)
"$bin" train --config configs/mnist-vl.json --train-config configs/motion-vl.train.json \
  --data "$out/data/train.jsonl" --out "$out/run" --force
end=$(date +%s.%N)
echo "--- held-out clips: the model's answers (greedy) next to the truth ---"
"$bin" eval images --model "$out/run" --data "$out/data/test.jsonl" --show 12 --json "$out/eval.json"
python3 -c "import sys; print(f'training: {float(sys.argv[2]) - float(sys.argv[1]):.0f} s')" "$start" "$end"
echo "--- done: $out/run; ask it yourself: $bin generate --model $out/run --video CLIP.gif --prompt '<|image|> which way does the square move?'"
