#!/usr/bin/env bash
# The zero-bubble schedule ZB-H1 (parallel.schedule = "zb-h1": each backward as its input gradient B
# and its weight gradient W, pipeline/schedule.h) trains exactly as 1F1B through the CLI: GPT and
# Llama (4 layers, 8 micro-batches, fp32; GPT with dropout and clipping) at pipeline 2 and 4, and
# pipeline 2 with data 2 and with 1D tensor 2, give per-step, eval and final losses bitwise 1F1B's
# (each gradient sums the same products in the same order: the W's of a stage run in micro-batch
# order), every rank ran W passes (the summary's pipeline.weight_us_per_rank) and the summary's
# idle fraction is there. Then the error ZB-H1 gives where the chunks keep the model (bf16): exit 2
# naming the keys.
# usage: check_zero_bubble.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
source "$support/expect_error.sh"
config=$(cd "$(dirname "$0")/../.." && pwd)/configs/llama-tiny.toml
gpt=(--set train.steps=8 --set train.batch_size=16 --set train.micro_batch_size=2 --set model.dropout=0.1
     --set train.eval_every=4 --set train.eval_batches=1 --set train.grad_clip=0.5 --set model.n_head=4
     --set model.n_embd=64 --set model.n_layer=4)
llama=(-c "$config" --set train.steps=8 --set train.batch_size=16 --set train.micro_batch_size=2 --set model.n_layer=4
       --set model.n_embd=64 --set model.n_head=4 --set model.n_kv_head=2 --set model.intermediate_size=96
       --set train.eval_every=4 --set train.eval_batches=1)
run() {  # <name> <ranks> <arguments...>
  local name=$1 np=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$tidal" train "$@" --metrics "$dir/$name.jsonl" > "$dir/$name.log" 2>&1 ||
    { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
}
pairs=()
for model in gpt llama; do
  declare -n settings=$model
  for layout in "p2 2 --set parallel.pipeline=2" "p4 4 --set parallel.pipeline=4" \
                "p2_d2 4 --set parallel.pipeline=2 --set parallel.data=2" \
                "p2_t2 4 --set parallel.pipeline=2 --set parallel.tensor.size=2"; do
    read -r name np rest <<< "$layout"
    # shellcheck disable=SC2086
    run "${model}_${name}_1f1b" "$np" "${settings[@]}" $rest --set parallel.schedule=1f1b
    # shellcheck disable=SC2086
    run "${model}_${name}_zb" "$np" "${settings[@]}" $rest --set parallel.schedule=zb-h1
    pairs+=("${model}_${name}")
  done
done
/usr/bin/python3 - "$dir" "$support" "${pairs[@]}" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
for pair in sys.argv[3:]:
    compare(d, pair + "_zb", pair + "_1f1b", 0.0, all_steps=True)
    summary = [json.loads(l) for l in open(f"{d}/{pair}_zb.jsonl")][-1]
    p = summary["pipeline"]
    assert all(w > 0 for w in p["weight_us_per_rank"]), (pair, p)
    assert 0 <= p["idle_fraction"] < 1, (pair, p)
    f1b = [json.loads(l) for l in open(f"{d}/{pair}_1f1b.jsonl")][-1]["pipeline"]
    assert all(w == 0 for w in f1b["weight_us_per_rank"]), (pair, f1b)
print(f"PASS: ZB-H1 = 1F1B bitwise for GPT and Llama at pipeline 2, 4, 2 x data 2, 2 x tensor 2 ({len(sys.argv) - 3} pairs); "
      "every rank ran W passes")
PY
expect_error 'parallel.schedule = "zb-h1" runs its weight-gradient passes on fp32 tensors' 2 "${gpt[@]}" \
  --set parallel.pipeline=2 --set parallel.schedule=zb-h1 --set train.precision=bf16
echo "PASS: ZB-H1 where chunks keep the model (bf16) exits 2 naming the keys"
