#!/usr/bin/env bash
# A LoRA run's frozen base on the host or disk (finetune.base_offload = "host" | "disk"), each
# module's weights streamed into the step's memory as it runs: the losses of 4 bf16 steps are
# bitwise those with the base on the device tier (and an NF4 base's from disk its on the device's),
# the summary says where the base was (frozen_on) and every step streamed it twice
# (base_stream_bytes = 2 x frozen_bytes: one forward, one backward); from disk the host's peak is
# the base's bytes below the run that holds it on the host, but for one parameter being made. Under a 48 MiB device cap
# `tidal plan` finds 6 layers with the base on the device, and with it on the host every depth it
# tries (16: the device holds one module's weights at a time), which trains. Then the errors
# finetune.base_offload gives without adapters, and "disk" without memory.disk_dir (exit 2).
# usage: check_base_offload.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config=$(cd "$(dirname "$0")/../.." && pwd)/configs/llama-tiny.toml
common=(-c "$config" --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.n_kv_head=2
        --set model.intermediate_size=96 --set model.vocab_size=128 --set model.seq_len=64 --set train.steps=4
        --set train.eval_every=0 --set train.precision=bf16 --set finetune.method=lora
        --set finetune.lora_targets=q_proj,v_proj,down_proj)
mkdir "$dir/disk_tier"
train_with() {  # name, base_offload, more settings
  local name=$1 base=$2; shift 2
  "$tidal" train "${common[@]}" --set finetune.base_offload="$base" --set memory.disk_dir="$dir/disk_tier" "$@" \
    --metrics "$dir/$name.jsonl" > "$dir/$name.log" 2>&1 ||
    { cat "$dir/$name.log"; echo "FAIL: training with finetune.base_offload = $base $*"; exit 1; }
}
train_with none none --set memory.disk_dir=
train_with host host --set memory.disk_dir=
train_with disk disk
train_with none_nf4 none --set memory.disk_dir= --set finetune.base_dtype=nf4
train_with disk_nf4 disk --set finetune.base_dtype=nf4
[ -z "$(ls -A "$dir/disk_tier")" ] || { ls -la "$dir/disk_tier"; echo "FAIL: the base's file outlived its run"; exit 1; }
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
rows = {b: [json.loads(l) for l in open(f"{d}/{b}.jsonl")] for b in ("none", "host", "disk", "none_nf4", "disk_nf4")}
losses = {b: [r["loss"] for r in rs if "loss" in r and not r.get("summary")] for b, rs in rows.items()}
assert len(losses["host"]) == 4 and losses["host"] == losses["none"] == losses["disk"], losses
assert len(losses["disk_nf4"]) == 4 and losses["disk_nf4"] == losses["none_nf4"], losses
summary = {b: rs[-1] for b, rs in rows.items()}
for b, where in (("none", "device"), ("host", "host"), ("disk", "disk"), ("none_nf4", "device"), ("disk_nf4", "disk")):
    assert summary[b]["frozen_on"] == where, (b, summary[b]["frozen_on"])
    assert summary[b]["frozen_bytes"] == summary["none_nf4" if "nf4" in b else "none"]["frozen_bytes"] > 0
    streamed = [r["base_stream_bytes"] for r in rows[b] if "base_stream_bytes" in r]
    assert streamed == ([2 * summary[b]["frozen_bytes"]] * 4 if where != "device" else []), (b, streamed)
assert summary["disk_nf4"]["frozen_bytes"] < summary["disk"]["frozen_bytes"]
host_peak = {b: summary[b]["peak_bytes"]["host"] for b in ("host", "disk")}
# The host holds the base from disk only while making it, a parameter at a time (in fp32, then bf16):
# its peak is the host run's less the base, plus at most the largest parameter so made (the
# vocabulary's 128 x 64 table). Measured: 40960 bytes above the host run's less the base.
made = (4 + 2) * 128 * 64
assert host_peak["disk"] + summary["disk"]["frozen_bytes"] <= host_peak["host"] + made, (host_peak, summary["disk"]["frozen_bytes"])
print(f"PASS: the base on the host and on disk: 4 losses bitwise the base on the device's (NF4 from disk too); "
      f"{summary['host']['frozen_bytes']} bytes of base, {2 * summary['host']['frozen_bytes']} streamed a step; the "
      f"host's peak {host_peak['disk']} bytes from disk, {host_peak['host']} with the base on the host")
PY
# The largest model under a device cap (tidal plan without --world: layers added one at a time, traced).
caps=(--set model.type=llama --set model.n_embd=512 --set model.n_head=8 --set model.seq_len=32
      --set train.batch_size=2 --set memory.offload=chunk --set memory.device_limit=48MiB --set memory.host_limit=256MiB
      --set finetune.method=lora --set train.precision=bf16 --set train.steps=2 --set train.eval_every=0)
largest() { "$tidal" plan "${caps[@]}" --set finetune.base_offload="$1" --max-layers 16 | sed -n 's/^largest: \([0-9]*\) layers.*/\1/p'; }
n_host=$(largest host)
n_device=$(largest none)
[[ -n "$n_host" && -n "$n_device" && $n_host -eq 16 && $n_device -lt 16 ]] ||
  { echo "FAIL: largest with the base on the host $n_host layers, on the device $n_device"; exit 1; }
"$tidal" train "${caps[@]}" --set finetune.base_offload=host --set model.n_layer="$n_host" > "$dir/fits.log" 2>&1 ||
  { cat "$dir/fits.log"; echo "FAIL: the planned $n_host layers do not train under the cap"; exit 1; }
echo "PASS: under a 48 MiB device cap tidal plan's largest model with the base on the host ($n_host layers, the most it tries; $n_device with it on the device) trains"
set +e
out=$("$tidal" train "${common[@]}" --set finetune.method=full --set finetune.base_offload=host --set train.steps=1 2>&1)
rc=$?
set -e
[[ $rc -eq 2 && "$out" == *'set finetune.method = "lora"'* ]] || { echo "$out"; echo "FAIL: exit $rc"; exit 1; }
echo "PASS: finetune.base_offload = \"host\" without adapters exits 2 naming finetune.method"
set +e
out=$("$tidal" train "${common[@]}" --set finetune.base_offload=disk --set train.steps=1 2>&1)
rc=$?
set -e
[[ $rc -eq 2 && "$out" == *'set memory.disk_dir'* ]] || { echo "$out"; echo "FAIL: exit $rc"; exit 1; }
echo "PASS: finetune.base_offload = \"disk\" without memory.disk_dir exits 2 naming memory.disk_dir"
