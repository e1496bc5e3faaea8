#!/usr/bin/env bash
# Resume is exact: 20 steps straight equal --stop-after 10 then --resume to step 20, loss for
# loss, bitwise (dropout on, gradient accumulation on).
# usage: check_resume.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--set train.steps=20 --set model.dropout=0.1 --set train.batch_size=8 --set train.micro_batch_size=4
        --set train.eval_every=0 --set train.eval_batches=2 --set train.warmup_steps=5)
"$tidal" train "${common[@]}" --metrics "$dir/straight.jsonl" > /dev/null
"$tidal" train "${common[@]}" --set checkpoint.dir="$dir/ckpt" --stop-after 10 --metrics "$dir/resumed.jsonl" > /dev/null
"$tidal" train "${common[@]}" --set checkpoint.dir="$dir/ckpt" --resume "$dir/ckpt" --metrics "$dir/resumed.jsonl" > /dev/null
/usr/bin/python3 - "$dir/straight.jsonl" "$dir/resumed.jsonl" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r and not r.get("summary")}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(a) == list(range(1, 21)), f"straight run steps: {sorted(a)}"
assert sorted(b) == list(range(1, 21)), f"resumed run steps: {sorted(b)}"
bad = [(s, a[s], b[s]) for s in a if a[s] != b[s]]
for s, x, y in bad:
    print(f"step {s}: straight {x!r} resumed {y!r}")
assert not bad, f"{len(bad)} steps differ"
print("20 losses bitwise equal across --stop-after 10 / --resume; step 20 loss", a[20])
PY
