#!/usr/bin/env bash
# How myriad degrades when other processes hold the cores (issue 18): training tokens/s and decode tokens/s
# of the demo model, alone and beside 1 and 2 CPU-bound busy loops, under three OpenMP wait policies:
#   spin-300k  libgomp's default (idle threads spin ~300,000 iterations before sleeping): MYRIAD_NO_REEXEC=1
#   spin-10k   GOMP_SPINCOUNT=10000 (a short spin)
#   passive    OMP_WAIT_POLICY=passive (idle threads sleep at once)
#   auto       myriad's default: tools/myriad.cc re-executes itself with passive when other threads are runnable at
#              start-up, else with the short spin
# POLICIES="auto" scripts/shared_machine_bench.sh runs a subset.
# The ideal beside N busy loops is the CPU share the scheduler leaves myriad's threads: T / (T + N) of the
# machine for T threads on as many cores (2/3 with one busy loop, 1/2 with two, on this 2-core box).
#   scripts/shared_machine_bench.sh [RUN_DIR (default runs/demo: make demo)] [WORK_DIR (default /tmp/myriad-shared)]
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/demo}"; work="${2:-/tmp/myriad-shared}"
bin=build/release/myriad
[[ -d "$run/data" && -d "$run/tokenizer" ]] || { echo "needs a trained run with data/ and tokenizer/ (make demo)"; exit 2; }
rm -rf "$work"; mkdir -p "$work"
cat >"$work/train.json" <<'JSON'
{"stages": [{"seq_len": 256, "steps": 60}], "batch_tokens": 1024, "lr": 0.003, "warmup_steps": 5,
 "eval_every": 1000, "eval_batches": 1, "task_eval_per_task": 0, "checkpoint_every": 1000, "log_every": 1000}
JSON
cores=$(nproc)
busy_pids=()
start_busy() { for _ in $(seq "$1"); do python3 -c 'while True: pass' & busy_pids+=($!); done; sleep 0.5; }
stop_busy() { ((${#busy_pids[@]})) && kill "${busy_pids[@]}" 2>/dev/null; wait 2>/dev/null || true; busy_pids=(); }
trap stop_busy EXIT
policy_env() {
  case "$1" in
    spin-300k) echo "MYRIAD_NO_REEXEC=1" ;;
    spin-10k) echo "GOMP_SPINCOUNT=10000" ;;
    auto) echo "MYRIAD_POLICY_AUTO=1" ;;  # nothing that matters set: the launcher chooses
    passive) echo "OMP_WAIT_POLICY=passive" ;;
  esac
}
train_tps() {  # median tokens/s of steps 6..60
  rm -rf "$work/t"
  env $(policy_env "$1") "$bin" train --config configs/tiny.json --data "$run/data" --tokenizer "$run/tokenizer" \
    --train-config "$work/train.json" --out "$work/t" --quiet >/dev/null 2>&1
  python3 -c "
import json, statistics, sys
v = [json.loads(l)['tokens_per_s'] for l in open(sys.argv[1]) if '\"type\": \"step\"' in l or '\"type\":\"step\"' in l]
print(round(statistics.median(v[5:]), 0))" "$work/t/metrics.jsonl"
}
decode_tps() {  # token-by-token decode of 8192 tokens of the run's validation text (myriad eval --decode), per second
  local t0 t1
  t0=$(date +%s.%N)
  env $(policy_env "$1") "$bin" eval --model "$run" --data "$run/data" --decode --max-tokens 8193 >/dev/null 2>&1
  t1=$(date +%s.%N)
  python3 -c "print(round(8192 / ($t1 - $t0), 0))"
}
printf '%-10s %6s %12s %8s %12s %8s %8s\n' policy busy "train tok/s" ratio "decode tok/s" ratio ideal
for policy in ${POLICIES:-spin-300k spin-10k passive auto}; do
  base_t=""; base_d=""
  for n in 0 1 2; do
    start_busy "$n"
    tps=$(train_tps "$policy"); dps=$(decode_tps "$policy")
    stop_busy
    [[ -z "$base_t" ]] && base_t=$tps && base_d=$dps
    ideal=$(python3 -c "print(round($cores / ($cores + $n), 2))")
    printf '%-10s %6s %12s %8s %12s %8s %8s\n' "$policy" "$n" "$tps" "$(python3 -c "print(round($tps / $base_t, 2))")" \
      "$dps" "$(python3 -c "print(round($dps / $base_d, 2))")" "$ideal"
  done
done
