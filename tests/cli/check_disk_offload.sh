#!/usr/bin/env bash
# The disk tier through the CLI (memory.disk_dir, src/memory/disk_tier.h): a GPT under
# memory.offload = chunk with the device tier capped at 25% of its model data and the host tier
# at half of it - below the optimizer states' three quarters - keeps the optimizer states the
# host cannot hold in a file in memory.disk_dir, and gives the uncapped run's per-step, eval and
# final losses exactly. Every step reads each disk chunk's states once and writes them back once
# (the metrics' bytes_from_disk and bytes_to_disk), and the file is gone after the run. Stopped
# after 3 steps and resumed from the checkpoint, the run gives the same losses again; a run that
# stops in an error removes its file too. The same caps without memory.disk_dir stop at start
# (exit 2) saying what the host needs and that memory.disk_dir is a way out; a disk_dir that does
# not exist stops there too, naming it, and so does memory.disk_dir without memory.offload (a
# configuration error), and memory.disk_limit below the states the host leaves to the disk.
# usage: check_disk_offload.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
chunk=100000
common=(--set model.n_embd=128 --set model.n_layer=4 --set model.n_head=4 --set model.seq_len=32
        --set train.batch_size=2 --set train.steps=6 --set train.eval_every=3 --set train.eval_batches=1
        --set memory.chunk_size=$chunk --set memory.offload=chunk)
"$tidal" train "${common[@]}" --set memory.device_limit=64GiB --metrics "$dir/uncapped.jsonl" > "$dir/uncapped.log"
read -r device host < <(/usr/bin/python3 -c "
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][-1]['model_data']['model_data_bytes']
print(m // 4, m // 2)" "$dir/uncapped.jsonl")
caps=(--set memory.device_limit="$device" --set memory.host_limit="$host")
mkdir "$dir/disk"

# With the disk tier: uninterrupted, and stopped after 3 steps then resumed.
"$tidal" train "${common[@]}" "${caps[@]}" --set memory.disk_dir="$dir/disk" --metrics "$dir/disk.jsonl" \
  > "$dir/disk.log"
file=$(grep -o "$dir/disk/tidal-rank0-pid[^ ]*" "$dir/disk.log") ||
  { cat "$dir/disk.log"; echo "FAIL: no disk file named"; exit 1; }
echo "disk tier file during the run: $file"
[[ ! -e $file && -z $(ls -A "$dir/disk") ]] || { echo "FAIL: the disk file outlived the run"; exit 1; }
resumed=(--set memory.disk_dir="$dir/disk" --set checkpoint.dir="$dir/ckpt" --metrics "$dir/resumed.jsonl")
"$tidal" train "${common[@]}" "${caps[@]}" "${resumed[@]}" --stop-after 3 > /dev/null
"$tidal" train "${common[@]}" "${caps[@]}" "${resumed[@]}" --resume "$dir/ckpt" > /dev/null
[[ -z $(ls -A "$dir/disk") ]] || { echo "FAIL: a disk file outlived a resumed run"; exit 1; }

# Without it the host cannot hold the optimizer states; a directory that is not there.
set +e
out=$("$tidal" train "${common[@]}" "${caps[@]}" 2>&1 >/dev/null)
rc=$?
missing=$("$tidal" train "${common[@]}" "${caps[@]}" --set memory.disk_dir="$dir/missing" 2>&1 >/dev/null)
missing_rc=$?
alone=$("$tidal" train --set memory.disk_dir="$dir/disk" 2>&1 >/dev/null)
alone_rc=$?
# A run that stops in an error after the file was made (a device tier too small for an operator).
"$tidal" train "${common[@]}" --set memory.device_limit=1000000 --set memory.host_limit="$host" \
  --set memory.disk_dir="$dir/disk" > "$dir/failed.log" 2>&1
failed_rc=$?
set -e
[[ $failed_rc -eq 2 && $(grep -c "$dir/disk/tidal-rank0-pid" "$dir/failed.log") -eq 1 && -z $(ls -A "$dir/disk") ]] ||
  { cat "$dir/failed.log"; echo "FAIL: a run that stopped in an error (exit $failed_rc) left its disk file"; exit 1; }
echo "a run stopped by an error (exit 2) removed its disk file"

echo "without memory.disk_dir: exit $rc: $out"
[[ $rc -eq 2 && $out == *"out of host memory"*"memory.host_limit"*"set memory.disk_dir"*"host then needs at least"* ]] ||
  { echo "FAIL: want exit 2 naming the host's need and memory.disk_dir"; exit 1; }
echo "a disk_dir that does not exist: exit $missing_rc: $missing"
[[ $missing_rc -eq 2 && $missing == *"memory.disk_dir = \"$dir/missing\""* ]] ||
  { echo "FAIL: want exit 2 naming memory.disk_dir and the path"; exit 1; }
# The disk tier within memory.disk_limit: a cap below one chunk's states stops at start, naming
# both keys and leaving no file.
set +e
limited=$("$tidal" train "${common[@]}" "${caps[@]}" --set memory.disk_dir="$dir/disk" --set memory.disk_limit=1KiB 2>&1)
limited_rc=$?
set -e
echo "memory.disk_limit below the states: exit $limited_rc: $limited"
[[ $limited_rc -eq 2 && $limited == *"more than memory.disk_limit = 1.0 KiB: raise memory.host_limit or memory.disk_limit"* &&
   -z $(ls -A "$dir/disk") ]] ||
  { echo "FAIL: want exit 2 naming memory.disk_limit, and no disk file"; exit 1; }
echo "memory.disk_dir without memory.offload: exit $alone_rc: $alone"
[[ $alone_rc -eq 2 && $alone == *"memory.disk_dir keeps the optimizer states"*"set memory.offload"* ]] ||
  { echo "FAIL: want the configuration error"; exit 1; }

/usr/bin/python3 - "$dir" "$support" "$host" "$chunk" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d, host, chunk = sys.argv[1], int(sys.argv[3]), int(sys.argv[4])
compare(d, "disk", "uncapped", 0.0, all_steps=True)
compare(d, "resumed", "disk", 0.0, all_steps=True)
rows = [json.loads(l) for l in open(f"{d}/disk.jsonl")]
steps = [r for r in rows if "loss" in r and not r.get("summary")]
disk = rows[-1]["model_data"]["offload"]["disk"]
states = 3 * 4 * chunk  # a chunk's fp32 master copy, momentum and variance
model_data = json.loads(open(f"{d}/uncapped.jsonl").readlines()[-1])["model_data"]["model_data_bytes"]
print(f"host tier {host} bytes, the optimizer states {model_data * 3 // 4}: {disk['chunks']} chunks' states on disk "
      f"({disk['file_bytes']} bytes); per step MiB to disk {[round(r['bytes_to_disk'] / 2**20, 2) for r in steps]}, "
      f"from disk {[round(r['bytes_from_disk'] / 2**20, 2) for r in steps]}, "
      f"seconds {[round(r['disk_seconds'], 4) for r in steps]}")
assert host < model_data * 3 // 4
assert disk["chunks"] >= 3 and disk["file_bytes"] == disk["chunks"] * states
for r in steps:
    assert r["bytes_to_disk"] == r["bytes_from_disk"] == disk["chunks"] * states, f"step {r['step']}: {r}"
PY
