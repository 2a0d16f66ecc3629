#!/usr/bin/env bash
# make bench-mnist: real handwritten digits (MNIST's 10,000 test-set images in ../shared/data/mnist, or the IDX
# folder given): train configs/mnist-vl.json from scratch (encoder included) on the first 9,000 and ask "which digit
# is this?" about the other 1,000, scoring the GENERATED answer (greedy, exact match). Prints the wall time of the
# training and the accuracy; the run's metrics.jsonl has the held-out accuracy at each eval (accuracy against time).
set -euo pipefail
bin=./build/release/myriad
idx=${1:-../shared/data/mnist}
out=${2:-runs/mnist}
mkdir -p "$out"
"$bin" data mnist --idx "$idx" --out "$out/data" --train 9000
start=$(date +%s.%N)
"$bin" train --config configs/mnist-vl.json --data "$out/data/train.jsonl" --out "$out/run" --force
end=$(date +%s.%N)
"$bin" eval images --model "$out/run" --data "$out/data/test.jsonl" --show 10 --json "$out/eval.json"
python3 - "$out" "$start" "$end" <<'PY'
import json, sys
out, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
e = json.load(open(f"{out}/eval.json"))
print(f"MNIST by generated answer: {100 * e['accuracy']:.2f}% of {e['questions']} held-out digits "
      f"after {end - start:.0f} s of training (target 97% within 20 minutes on 2 cores)")
for line in open(f"{out}/run/metrics.jsonl"):
    r = json.loads(line)
    if r.get("type") == "eval" and "tasks" in r:
        print(f"  step {r['step']:5d}: held-out (train file's last 256) digit accuracy {100 * r['tasks']['digit']:.1f}%")
PY
