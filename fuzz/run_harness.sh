#!/usr/bin/env bash
# Runs one libFuzzer harness for <seconds> (or, with <seconds> = runs:N, for N executions) from
# the seed and regression corpora, growing a scratch corpus in <work>; a crash leaves its input
# there as crash-* and fails. Prints the executions and their rate.
# usage: run_harness.sh <harness> <seconds | runs:N> <work dir> <corpus dirs...>
set -euo pipefail
harness=$1 budget=$2 work=$3; shift 3
mkdir -p "$work/corpus"
limit=(-max_total_time="$budget")
[[ $budget == runs:* ]] && limit=(-runs="${budget#runs:}")
# Regression inputs first, one by one: each must run clean.
for d in "$@"; do
  [[ $d == */regressions/* ]] || continue
  "$harness" -runs=1 "$d"/* > /dev/null 2>&1 || { "$harness" "$d"/*; exit 1; }
done
set +e
"$harness" "${limit[@]}" -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/" \
  "$work/corpus" "$@" > "$work/log" 2>&1
rc=$?
set -e
grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^#[0-9]+.*DONE" "$work/log" | tail -3
if [ $rc -ne 0 ]; then
  tail -40 "$work/log"
  echo "FAIL: $(basename "$harness") found a crash (kept in $work/crash-*): add it to fuzz/regressions/ after the fix"
  exit 1
fi
echo "PASS: $(basename "$harness"): no crash"
