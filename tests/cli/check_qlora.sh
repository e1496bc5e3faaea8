#!/usr/bin/env bash
# QLoRA against LoRA (finetune.base_dtype = "nf4" against "compute"): a small Llama with adapters
# on all seven linears, bf16, 300 steps each on the built-in Markov language. The QLoRA run's loss
# (the mean of its last 20 steps) is within 2% of the bf16-base run's, and both learned (that mean
# at least 0.3 nats below the first step's). Its frozen base is the NF4 linears (about 0.52 bytes
# a parameter) beside the bf16 embedding, norms and head: the summary's frozen_bytes equal
# `tidal plan`'s prediction exactly and are under half the bf16 base's (the embedding and head, a
# large share of so small a model, stay bf16). Under a device cap the largest QLoRA model `tidal
# plan` finds trains and one layer more does not (more layers than on a bf16 base). Then the error
# finetune.base_dtype = "nf4" gives without adapters: exit 2 naming finetune.method.
# usage: check_qlora.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config=$(cd "$(dirname "$0")/../.." && pwd)/configs/llama-tiny.toml
common=(-c "$config" --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.n_kv_head=2
        --set model.intermediate_size=96 --set model.vocab_size=128 --set model.seq_len=64 --set train.steps=300
        --set train.lr=1e-2 --set train.min_lr=1e-3 --set train.warmup_steps=20 --set train.eval_every=0
        --set train.precision=bf16 --set train.log_every=100 --set finetune.method=lora
        --set finetune.lora_targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
for base in compute nf4; do
  "$tidal" train "${common[@]}" --set finetune.base_dtype=$base --metrics "$dir/$base.jsonl" > "$dir/$base.log" 2>&1 ||
    { cat "$dir/$base.log"; echo "FAIL: training with finetune.base_dtype = $base"; exit 1; }
done
"$tidal" plan "${common[@]}" --set finetune.base_dtype=nf4 --world 1 --configured --json > "$dir/plan.json" ||
  { echo "FAIL: tidal plan of the QLoRA run"; exit 1; }
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def run(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    return [r["loss"] for r in rows if "loss" in r and not r.get("summary")], rows[-1]
lora, lora_summary = run("compute")
qlora, qlora_summary = run("nf4")
last = lambda losses: sum(losses[-20:]) / 20
rel = abs(last(qlora) - last(lora)) / last(lora)
print(f"last 20 steps' mean loss: LoRA on a bf16 base {last(lora):.4f}, QLoRA on an NF4 base {last(qlora):.4f} "
      f"(relative difference {rel:.2e}); first steps {lora[0]:.4f}, {qlora[0]:.4f}")
assert rel <= 0.02, f"QLoRA's loss is {100 * rel:.1f}% from LoRA's"
assert last(lora) < lora[0] - 0.3 and last(qlora) < qlora[0] - 0.3, "the adapters did not learn"
plan = json.loads(open(f"{d}/plan.json").readline())["ranks"][0]["model_data"]["frozen_bytes"]
nf4, bf16 = qlora_summary["frozen_bytes"], lora_summary["frozen_bytes"]
print(f"frozen base: NF4 {nf4} bytes (planned {plan}), bf16 {bf16} bytes ({100 * nf4 / bf16:.0f}%)")
assert nf4 == plan, "the plan's frozen base differs from the run's"
assert nf4 < 0.5 * bf16, "the NF4 base is not smaller"
print("PASS: QLoRA within 2% of LoRA after 300 steps; its NF4 base as planned")
PY
# The largest QLoRA model under a device cap (tidal plan without --world: layers added one at a
# time, the frozen NF4 base traced on the device tier) trains there, and one layer more stops with
# an out-of-memory error; the same cap fits fewer layers of a bf16 base.
caps=(--set model.type=llama --set model.n_embd=512 --set model.n_head=8 --set model.seq_len=32
      --set train.batch_size=2 --set memory.offload=chunk --set memory.device_limit=48MiB --set memory.host_limit=96MiB
      --set finetune.method=lora --set train.precision=bf16 --set train.steps=2 --set train.eval_every=0)
largest() { "$tidal" plan "${caps[@]}" --set finetune.base_dtype="$1" --max-layers 40 | sed -n 's/^largest: \([0-9]*\) layers.*/\1/p'; }
n_nf4=$(largest nf4)
n_bf16=$(largest compute)
[[ -n "$n_nf4" && -n "$n_bf16" && $n_nf4 -gt $n_bf16 ]] || { echo "FAIL: largest QLoRA $n_nf4 layers, LoRA $n_bf16"; exit 1; }
"$tidal" train "${caps[@]}" --set finetune.base_dtype=nf4 --set model.n_layer="$n_nf4" > "$dir/fits.log" 2>&1 ||
  { cat "$dir/fits.log"; echo "FAIL: the planned $n_nf4 layers do not train under the cap"; exit 1; }
set +e
"$tidal" train "${caps[@]}" --set finetune.base_dtype=nf4 --set model.n_layer=$((n_nf4 + 1)) > "$dir/over.log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "out of device memory" "$dir/over.log" ||
  { cat "$dir/over.log"; echo "FAIL: $((n_nf4 + 1)) layers exit $rc under the cap"; exit 1; }
echo "PASS: under a 48 MiB device cap tidal plan's largest QLoRA model ($n_nf4 layers; $n_bf16 on a bf16 base) trains, one layer more does not"
set +e
out=$("$tidal" train "${common[@]}" --set finetune.method=full --set finetune.base_dtype=nf4 --set train.steps=1 2>&1)
rc=$?
set -e
[[ $rc -eq 2 && "$out" == *'set finetune.method = "lora"'* ]] || { echo "$out"; echo "FAIL: exit $rc"; exit 1; }
echo "PASS: finetune.base_dtype = \"nf4\" without adapters exits 2 naming finetune.method"
