#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz/fuzz_*.cc) under libFuzzer with ASan + UBSan for SECONDS each, two at a time
# (one per core), starting from the committed seed corpus (tests/fuzz/corpus/<target>/) plus what earlier runs
# found (build/fuzz/corpus/<target>/, kept between runs). Per input: 1 s timeout (model_config 5 s), 2 GB RSS cap. Prints one line
# per target (executions, rate, coverage, corpus) and fails if any target crashed, hung or ran out of memory; the
# input that did it is saved under build/fuzz/artifacts/<target>/ (replay it: build/fuzz/fuzz_<target> FILE).
#   scripts/fuzz.sh [SECONDS (default 60)] [TARGET ...]      e.g. scripts/fuzz.sh 30 safetensors openai_request
#   FUZZ_RUNS=N: stop each target after N executions instead (0: no limit; SECONDS still bounds it).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
bash scripts/deps.sh fuzz
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" >/dev/null
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cc; do
    n=$(basename "$f" .cc)
    targets+=("${n#fuzz_}")
  done
fi
out=build/fuzz
mkdir -p "$out/logs"

run_one() {
  local t="$1" seconds="$2" out="$3"
  mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
  local runs=()
  [[ -n "${FUZZ_RUNS:-}" && "${FUZZ_RUNS}" != 0 ]] && runs=(-runs="$FUZZ_RUNS")
  set +e
  # 1 s per input, except model_config: its largest real input, K3's config (93 layers x 896 experts: 250,000
  # tensor specs), takes 0.09 s optimised and ~2 s under ASan + coverage.
  local timeout=1
  [[ "$t" == model_config ]] && timeout=5
  MYRIAD_THREADS=1 "$out/fuzz_$t" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$t/" "${runs[@]}" "$out/corpus/$t" "tests/fuzz/corpus/$t" \
    >"$out/logs/$t.log" 2>&1
  echo $? >"$out/logs/$t.rc"
  set -e
}
export -f run_one

printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$out"

failed=0
printf '%-18s %8s %12s %10s %8s %8s  %s\n' target seconds executions "execs/s" cov corpus result
for t in "${targets[@]}"; do
  log="$out/logs/$t.log"
  rc=$(cat "$out/logs/$t.rc")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || true)
  corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || true)
  result=ok
  if [[ "$rc" != 0 ]]; then
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR: |==ERROR|runtime error|check failed|terminate called' "$log" || tail -1 "$log")"
    failed=1
  fi
  printf '%-18s %8s %12s %10s %8s %8s  %s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${corp:-?}" \
    "$result"
done
if ((failed)); then
  echo "fuzz: a target failed; its log is in $out/logs/, the input in $out/artifacts/<target>/" >&2
  exit 1
fi
