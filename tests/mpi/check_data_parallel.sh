#!/usr/bin/env bash
# Data parallelism trains exactly like one process: GPT for 20 steps with parallel.data = 2 and
# 4, with and without gradient accumulation (dropout on, gradients in several buckets), and with
# activation checkpointing at data = 2, gives
# per-step losses within 1e-5 (relative) of one process with the same global batch, and the
# same final eval loss. Each step's metrics record its data all-reduce: the gradients once and
# two scalars, at the ring all-reduce's 2 (p - 1) / p of their bytes.
# usage: check_data_parallel.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--set train.steps=20 --set train.batch_size=16 --set model.dropout=0.1 --set train.eval_every=10
        --set train.eval_batches=2 --set train.warmup_steps=5 --set parallel.bucket_mb=0.02)
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
source "$support/expect_error.sh"
"$tidal" train "${common[@]}" --metrics "$dir/single.jsonl" > "$dir/single.log"
"$tidal" train "${common[@]}" --set train.micro_batch_size=4 --metrics "$dir/single_accum.jsonl" > /dev/null
for layout in "2 0 none" "2 2 none" "4 0 none" "4 1 none" "2 2 blocks"; do
  set -- $layout
  np=$1 micro=$2 ckpt=$3
  name=data${np}_micro${micro}$([ "$ckpt" = none ] || echo "_$ckpt")
  "${MPIRUN[@]}" -np "$np" "$tidal" train "${common[@]}" --set parallel.data="$np" --set train.micro_batch_size="$micro" \
    --set train.activation_checkpointing="$ckpt" --metrics "$dir/$name.jsonl" > "$dir/$name.log"
done
/usr/bin/python3 - "$dir" "$support" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
worst_all = 0.0
for name in ["single_accum", "data2_micro0", "data2_micro2", "data4_micro0", "data4_micro1", "data2_micro2_blocks"]:
    worst, summary = compare(sys.argv[1], name, "single", 1e-5, all_steps=True)
    worst_all = max(worst_all, worst)
    if summary["layout"]["data"] > 1:
        comm = summary["communication"]["data"]["all_reduce"]
        assert comm["calls"] > 20, f"{name}: only {comm['calls']} all-reduces (buckets not split?)"
        # Each step's record: the gradients once (every micro-batch but the last accumulates
        # locally) and two scalars (the step's target count and loss sum), at 2 (p - 1) / p of
        # their fp32 bytes sent per rank.
        p = summary["layout"]["data"]
        for r in (json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")):
            if "summary" in r or "loss" not in r:
                continue
            step = r["communication"]["data"]["all_reduce"]
            assert step["elements"] == summary["parameters"] + 2, f"{name} step {r['step']}: {step}"
            assert step["bytes_sent"] == 2 * (p - 1) / p * 4 * step["elements"], f"{name} step {r['step']}: {step}"
print(f"PASS: data parallel = one process (worst relative difference {worst_all:.2e} <= 1e-5)")
PY

# A layout error under mpirun: exit code 2 and one message (every rank meets it; rank 0 says it).
expect_error "train.batch_size (7) must be divisible by parallel.data (2)" 2 --set parallel.data=2 \
  --set train.batch_size=7
# Where no GPU is visible, GPU ranks are refused the same way, before any collective on the GPU.
if ! "$tidal" info | grep -q "train.device=cuda"; then
  expect_error 'train.device = "cuda", but rank 0 sees no GPU' 2 --set parallel.data=2 --set train.device=cuda
fi
echo "PASS: a bad layout under mpirun exits 2 with one message"
