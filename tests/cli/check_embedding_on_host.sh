#!/usr/bin/env bash
# memory.embedding_on_host through the CLI (patrickstar-v1 sec. 8.2; src/nn/on_host.h): a GPT with
# an untied head and a large vocabulary, trained with chunks moving under a capped device tier,
# gives the same per-step, eval and final losses bit for bit whether its embedding tables live in
# the device's chunks or on the host with their lookups on the CPU - in fp32 and in bf16, and
# after a stop and a resume from a checkpoint - while the chunks move fewer bytes each step and
# are evicted less. The static partition (the whole param list on the device) fits under a cap
# that it does not fit without the embedding on the host. BERT (untied) trains the same way.
# usage: check_embedding_on_host.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
common=(--set model.n_embd=128 --set model.n_layer=2 --set model.n_head=4 --set model.seq_len=32
        --set model.vocab_size=4096 --set model.tie_embeddings=false
        --set train.batch_size=4 --set train.steps=6 --set train.eval_every=3 --set train.eval_batches=1
        --set memory.offload=chunk --set memory.device_limit=12MiB)
on_host=(--set memory.embedding_on_host=true)
for precision in fp32 bf16; do
  p=(--set train.precision=$precision)
  "$tidal" train "${common[@]}" "${p[@]}" --metrics "$dir/device-$precision.jsonl" > /dev/null
  "$tidal" train "${common[@]}" "${p[@]}" "${on_host[@]}" --metrics "$dir/host-$precision.jsonl" \
    > "$dir/host-$precision.log"
done
grep -q "the embedding layer's 2 parameters on the host" "$dir/host-fp32.log" ||
  { cat "$dir/host-fp32.log"; echo "FAIL: the run does not say where the embedding is"; exit 1; }
resumed=(--set checkpoint.dir="$dir/ckpt" --metrics "$dir/resumed.jsonl")
"$tidal" train "${common[@]}" "${on_host[@]}" "${resumed[@]}" --stop-after 3 > /dev/null
"$tidal" train "${common[@]}" "${on_host[@]}" "${resumed[@]}" --resume "$dir/ckpt" > /dev/null

# The static partition: the fp32 param list is 3 chunks (6 MiB) with the 2 MiB token table and 2
# (4 MiB) without it; beside the step's activations and gradients it needs 12.1 MiB, and 10.1 MiB.
static=(--set memory.offload=static --set memory.device_limit=11MiB)
set +e
out=$("$tidal" train "${common[@]}" "${static[@]}" 2>&1 >/dev/null)
rc=$?
set -e
echo "static partition, embedding on the device, 11 MiB: exit $rc"
[[ $rc -eq 2 && $out == *"static partition"* ]] || { echo "$out"; echo "FAIL: want exit 2 from the static partition"; exit 1; }
"$tidal" train "${common[@]}" "${static[@]}" "${on_host[@]}" --metrics "$dir/static-host.jsonl" > /dev/null

bert=(--set model.type=bert --set model.n_embd=64 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.vocab_size=2048 --set model.tie_embeddings=false --set train.batch_size=4 --set train.steps=4
      --set train.eval_every=2 --set train.eval_batches=1 --set memory.offload=chunk --set memory.device_limit=8MiB)
"$tidal" train "${bert[@]}" --metrics "$dir/bert-device.jsonl" > /dev/null
"$tidal" train "${bert[@]}" "${on_host[@]}" --metrics "$dir/bert-host.jsonl" > /dev/null

/usr/bin/python3 - "$dir" "$support" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]

def steps(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    return [r for r in rows if "loss" in r and not r.get("summary")], rows[-1]

for precision in ("fp32", "bf16"):
    compare(d, f"host-{precision}", f"device-{precision}", 0.0, all_steps=True)
    moved = {}
    for where in ("device", "host"):
        rows, last = steps(f"{where}-{precision}")
        per_step = [r["bytes_host_to_device"] + r["bytes_device_to_host"] for r in rows]
        evictions = sum(r["evictions"] for r in rows[1:])
        moved[where] = sum(per_step[1:])
        data = last["model_data"]
        print(f"{precision}, embedding on the {where}: MiB moved per step {[round(b / 2**20, 2) for b in per_step]}, "
              f"evictions after the warm-up {evictions}, device peak {data['offload']['device_peak_bytes']} bytes, "
              f"model data {data['model_data_bytes']} bytes, of it on the host for the embedding "
              f"{data.get('embedding_on_host_bytes', 0)}")
        assert all(r["device_peak_bytes"] <= 12 * 2**20 for r in rows), "the device tier passed its cap"
    assert moved["host"] < moved["device"], f"{precision}: the embedding on the host moved no fewer bytes: {moved}"
    print(f"{precision}: bytes moved after the warm-up, embedding on the host / on the device: "
          f"{moved['host']} / {moved['device']} = {moved['host'] / moved['device']:.2f}")
compare(d, "resumed", "host-fp32", 0.0, all_steps=True)
compare(d, "static-host", "device-fp32", 0.0, all_steps=True)
compare(d, "bert-host", "bert-device", 0.0, all_steps=True)
PY
