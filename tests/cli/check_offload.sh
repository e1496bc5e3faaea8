#!/usr/bin/env bash
# Heterogeneous memory through the CLI (memory.offload, src/memory/dynamic_memory.h): a GPT whose
# model data (fp32: 16 bytes per parameter) is large beside its activations trains with the device
# tier capped at 25% of its model data - the chunks, activations and gradients all inside the cap -
# and gives the uncapped run's per-step, eval and final losses exactly, with Belady's eviction and
# with LRU's; the device tier's measured peak stays within the cap, chunks are evicted in every
# step, and Belady moves no more bytes than LRU after the warm-up. The static partition
# (ZeRO-Offload: the whole param list on the device) cannot run under that cap and says how much
# it needs (exit 2).
# usage: check_offload.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
common=(--set model.n_embd=384 --set model.n_layer=4 --set model.n_head=4 --set model.seq_len=32
        --set train.batch_size=2 --set train.steps=8 --set train.eval_every=4 --set train.eval_batches=1
        --set memory.chunk_size=600000)
# Uncapped: the same chunks, the device tier large enough for everything (nothing moves after the
# warm-up).
"$tidal" train "${common[@]}" --set memory.offload=chunk --set memory.device_limit=64GiB \
  --metrics "$dir/uncapped.jsonl" > "$dir/uncapped.log"
cap=$(/usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(rows[-1]['model_data']['model_data_bytes'] // 4)" "$dir/uncapped.jsonl")
for eviction in belady lru; do
  "$tidal" train "${common[@]}" --set memory.offload=chunk --set memory.device_limit="$cap" \
    --set memory.eviction=$eviction --metrics "$dir/$eviction.jsonl" > "$dir/$eviction.log"
done
set +e
out=$("$tidal" train "${common[@]}" --set memory.offload=static --set memory.device_limit="$cap" 2>&1 >/dev/null)
rc=$?
set -e
echo "static partition under the cap: exit $rc: $out"
[[ $rc -eq 2 && $out == *"static partition"*"at least"* ]] || { echo "FAIL: want exit 2 naming the need"; exit 1; }
/usr/bin/python3 - "$dir" "$support" "$cap" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d, cap = sys.argv[1], int(sys.argv[3])
moved = {}
for eviction in ("belady", "lru"):
    compare(d, eviction, "uncapped", 0.0, all_steps=True)
    rows = [json.loads(l) for l in open(f"{d}/{eviction}.jsonl")]
    steps = [r for r in rows if "loss" in r and not r.get("summary")]
    summary = rows[-1]["model_data"]["offload"]
    peak = summary["device_peak_bytes"]
    per_step = [r["bytes_host_to_device"] + r["bytes_device_to_host"] for r in steps]
    moved[eviction] = sum(per_step[1:])
    print(f"{eviction}: device tier peak {peak} of {cap} bytes ({peak / cap:.3f}); model data "
          f"{rows[-1]['model_data']['model_data_bytes']}; evictions per step {[r['evictions'] for r in steps]}; "
          f"MiB moved per step {[round(b / 2**20, 1) for b in per_step]}")
    assert peak <= cap, f"{eviction}: the device tier's peak passed the cap"
    assert all(r["evictions"] > 0 for r in steps), f"{eviction}: a step without evictions"
print(f"bytes moved after the warm-up: belady {moved['belady']}, lru {moved['lru']}")
assert moved["belady"] <= moved["lru"]
PY
