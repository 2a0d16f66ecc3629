#!/usr/bin/env bash
# The three MoE balancers side by side (README "Balancers side by side"): configs/balancing-64.json (64 experts,
# top-4) trained on tinyshakespeare with the same steps, seed and data for balancing qb, aux_loss and sign_update
# at their config defaults (aux_loss_coef, bias_update_rate 0.001), then both with 10x their coefficient; prints
# one table from the runs' metrics.jsonl and writes OUT_DIR/compare.html (`myriad report` of all five runs: their
# curves overlaid). A benchmark, not a test (minutes on 2 cores).
#   scripts/compare_balancers.sh [DATA] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:-../shared/data/tinyshakespeare.txt}"
out="${2:-runs/balancers}"
myriad=./build/release/myriad
[[ -x $myriad ]] || make build
mkdir -p "$out"
variants="qb aux_loss sign_update aux_loss:0.01 sign_update:0.01"
for b in $variants; do
  python3 - "$b" "$out/$b.json" <<'PY'
import json, sys
c = json.load(open("configs/balancing-64.json"))
name, _, coef = sys.argv[1].partition(":")
c["balancing"] = name
if coef:
    c["aux_loss_coef" if name == "aux_loss" else "bias_update_rate"] = float(coef)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  echo "--- balancing $b"
  "$myriad" train --config "$out/$b.json" --train-config configs/balancing-64.train.json --data "$data" \
    --out "$out/$b" --force --quiet
  "$myriad" report "$out/$b" >/dev/null
done
python3 - "$out" $variants <<'PY'
import json, os, sys
out = sys.argv[1]
print("\n| balancing | mean max violation, worst layer (per layer) | last-100-step mean, worst layer | "
      "dead experts at the end (all layers) | final val loss |")
print("|---|---|---|---|---|")
for b in sys.argv[2:]:
    steps, val = [], None
    for line in open(os.path.join(out, b, "metrics.jsonl")):
        r = json.loads(line)
        if r.get("type") == "step" and "moe" in r:
            steps.append(r)
        elif r.get("type") == "eval" and "val_loss" in r:
            val = r["val_loss"]
    layers = sorted({m["layer"] for s in steps for m in s["moe"]})
    def mean_viol(ss):
        return {l: sum(m["max_violation"] for s in ss for m in s["moe"] if m["layer"] == l) / len(ss) for l in layers}
    allv, lastv = mean_viol(steps), mean_viol(steps[-100:])
    per = ", ".join(f"L{l} {allv[l]:.2f}" for l in layers)
    dead = sum(m["dead_experts"] for m in steps[-1]["moe"])
    print(f"| {b} | {max(allv.values()):.2f} ({per}) | {max(lastv.values()):.2f} | {dead} | {val:.4f} |")
PY
"$myriad" report $(for b in $variants; do echo "$out/$b"; done) --out "$out/compare.html"
