#!/usr/bin/env bash
# A LoRA run's frozen base on the host (finetune.base_offload = "host"), each module's weights
# streamed into the step's memory as it runs: the losses of 4 bf16 steps are bitwise those with the
# base on the device tier, the summary says the base was on the host (frozen_on) and every step
# streamed it twice (base_stream_bytes = 2 x frozen_bytes: one forward, one backward). Under a
# 48 MiB device cap `tidal plan` finds 6 layers with the base on the device, and with it on the
# host every depth it tries (16: the device holds one module's weights at a time), which trains. Then the error finetune.base_offload gives without adapters (exit 2).
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
for base in none host; do
  "$tidal" train "${common[@]}" --set finetune.base_offload=$base --metrics "$dir/$base.jsonl" > "$dir/$base.log" 2>&1 ||
    { cat "$dir/$base.log"; echo "FAIL: training with finetune.base_offload = $base"; exit 1; }
done
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
rows = {b: [json.loads(l) for l in open(f"{d}/{b}.jsonl")] for b in ("none", "host")}
losses = {b: [r["loss"] for r in rs if "loss" in r and not r.get("summary")] for b, rs in rows.items()}
assert len(losses["host"]) == 4 and losses["host"] == losses["none"], losses
device, host = rows["none"][-1], rows["host"][-1]
assert device["frozen_on"] == "device" and host["frozen_on"] == "host", (device["frozen_on"], host["frozen_on"])
assert host["frozen_bytes"] == device["frozen_bytes"] > 0
streamed = [r["base_stream_bytes"] for r in rows["host"] if "base_stream_bytes" in r]
assert streamed == [2 * host["frozen_bytes"]] * 4, (streamed, host["frozen_bytes"])
assert not any("base_stream_bytes" in r for r in rows["none"])
print(f"PASS: the base on the host: 4 losses bitwise the base on the device's; {host['frozen_bytes']} bytes of base, "
      f"{streamed[0]} streamed a step")
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
