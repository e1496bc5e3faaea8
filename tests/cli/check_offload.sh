#!/usr/bin/env bash
# Heterogeneous memory through the CLI (memory.offload, src/memory/dynamic_memory.h): a GPT whose
# model data (fp32: 16 bytes per parameter) is large beside its activations trains with the device
# tier capped at 25% of its model data - the chunks, activations and gradients all inside the cap -
# and gives the uncapped run's per-step, eval and final losses exactly, with Belady's eviction and
# with LRU's; the device tier's measured peak stays within the cap, chunks are evicted in every
# step, and Belady moves no more bytes than LRU after the warm-up. The static partition
# (ZeRO-Offload: the whole param list on the device) cannot run under that cap and says how much
# it needs (exit 2).
# The warm-up's budget (patrickstar-v2 sec. 6.1): a GPT whose activations take over 80% of an
# 8 MiB device tier (width 128, 3 layers, batch 8 x 32, chunks of 65,536) trains there, bitwise
# like the uncapped run and within the cap; one byte below the least cap its warm-up traces it
# exits 2 naming that least cap in bytes, and the least cap itself trains within it.
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
warm=(--set model.n_embd=128 --set model.n_layer=3 --set model.n_head=4 --set train.batch_size=8
      --set model.seq_len=32 --set memory.chunk_size=65536 --set memory.offload=chunk --set train.steps=4
      --set train.eval_every=2 --set train.eval_batches=1)
"$tidal" train "${warm[@]}" --set memory.device_limit=1GiB --metrics "$dir/warm_uncapped.jsonl" > /dev/null
"$tidal" train "${warm[@]}" --set memory.device_limit=8MiB --metrics "$dir/warm_8mib.jsonl" > /dev/null
set +e
out=$("$tidal" train "${warm[@]}" --set memory.device_limit=1MiB 2>&1 >/dev/null)
rc=$?
set -e
least=$(printf '%s' "$out" | sed -n 's/.*needs at least \([0-9]*\) bytes.*/\1/p')
[[ $rc -eq 2 && -n $least ]] || { echo "FAIL: a 1 MiB cap: exit $rc, want 2 naming the least cap: $out"; exit 1; }
set +e
out=$("$tidal" train "${warm[@]}" --set memory.device_limit=$((least - 1)) 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc -eq 2 && $out == *"needs at least $least bytes"* ]] ||
  { echo "FAIL: one byte below $least: exit $rc, want 2 naming $least: $out"; exit 1; }
"$tidal" train "${warm[@]}" --set memory.device_limit="$least" --metrics "$dir/warm_least.jsonl" > /dev/null
echo "the warm-up reproducer: least device cap $least bytes; one byte less: $out"
/usr/bin/python3 - "$dir" "$support" "$least" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d, least = sys.argv[1], int(sys.argv[3])
for name, cap in (("warm_8mib", 8 << 20), ("warm_least", least)):
    compare(d, name, "warm_uncapped", 0.0, all_steps=True)
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    peak = rows[-1]["model_data"]["offload"]["device_peak_bytes"]
    non_model = rows[-1]["model_data"]["offload"]["trace"]["peak_non_model_bytes"]
    print(f"{name}: device tier peak {peak} of {cap} bytes; the warm-up's non-model peak {non_model} "
          f"({non_model / cap:.0%} of the cap)")
    assert peak <= cap, f"{name}: the device tier's peak passed the cap"
PY
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
