#!/usr/bin/env bash
# Checkpoints load under any layout: a GPT saved at step 4 of 8 under four composed layouts -
# data 2 x pipeline 2 x 1D tensor 2 at ZeRO-3 in bf16 (written in the background), pipeline 2 x
# 2D tensor 4 at ZeRO-1 in fp32, data 2 x an interleaved pipeline 2 at ZeRO-1 in bf16, and data 2
# at ZeRO-2 in fp32 with chunks offloaded under a device cap - is loaded under three others each
# (one process among them, and another data-parallel size). Resumed at the checkpoint's own step
# (--stop-after 4) each load writes what it loaded: its fp32 master weights and AdamW moments
# must be the saved ones bitwise (both gathered whole by `tidal checkpoint consolidate`).
# Resumed to step 8, each must continue the uninterrupted run's losses within its precision's
# tolerance (check_composition.sh says why those are: bf16 2e-3, fp32 1e-5 relative). And the
# cost model (tidal plan) predicts the bytes each rank of each saving layout writes, exactly.
# usage: check_checkpoint_reshard.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
MPIRUN=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
common=(--set train.steps=8 --set train.batch_size=16 --set train.micro_batch_size=2 --set model.n_head=4
        --set model.n_embd=64 --set model.n_layer=4 --set model.seq_len=32 --set train.eval_every=0
        --set train.eval_batches=1 --set train.warmup_steps=2 --set train.grad_clip=0.5 --set train.lr=3e-4)
# launch <ranks> <log> <arguments...>
launch() {
  local np=$1 log=$2; shift 2
  local how=()
  [ "$np" = 1 ] || how=("${MPIRUN[@]}" -np "$np")
  "${how[@]}" "$tidal" train "${common[@]}" "$@" > "$log" 2>&1 || { cat "$log"; echo "FAIL: $log"; exit 1; }
}
declare -A ranks layout
ranks[d2_p2_t2_zero3_bf16]=8
layout[d2_p2_t2_zero3_bf16]="--set train.precision=bf16 --set parallel.data=2 --set parallel.pipeline=2 \
  --set parallel.tensor.size=2 --set zero.stage=3 --set checkpoint.async=true"
ranks[p2_2d4_zero1_fp32]=8
layout[p2_2d4_zero1_fp32]="--set train.precision=fp32 --set parallel.pipeline=2 --set parallel.tensor.size=4 \
  --set parallel.tensor.mode=2d --set zero.stage=1"
ranks[d2_p2_interleaved_zero1_bf16]=4
layout[d2_p2_interleaved_zero1_bf16]="--set train.precision=bf16 --set parallel.data=2 --set parallel.pipeline=2 \
  --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set zero.stage=1"
ranks[d2_offload_zero2_fp32]=2
layout[d2_offload_zero2_fp32]="--set train.precision=fp32 --set parallel.data=2 --set zero.stage=2 \
  --set memory.offload=chunk --set memory.device_limit=2MiB --set memory.chunk_size=20000"
# The loads of each save: <name>:<ranks>:<arguments> (the precision stays the saved one).
declare -A loads
loads[d2_p2_t2_zero3_bf16]="one:1: d4_zero1:4:--set parallel.data=4 --set zero.stage=1 \
  t3d8:8:--set parallel.tensor.size=8 --set parallel.tensor.mode=3d --set zero.stage=1 --set train.micro_batch_size=4"
loads[p2_2d4_zero1_fp32]="one:1: d2_t2_zero2:4:--set parallel.data=2 --set parallel.tensor.size=2 --set zero.stage=2 \
  s2_ring:2:--set parallel.sequence=2"
loads[d2_p2_interleaved_zero1_bf16]="one:1: t4_2d:4:--set parallel.tensor.size=4 --set parallel.tensor.mode=2d \
  d4_zero3:4:--set parallel.data=4 --set zero.stage=3"
loads[d2_offload_zero2_fp32]="one:1: p2_zero1:2:--set parallel.pipeline=2 --set zero.stage=1 \
  d4_zero3:4:--set parallel.data=4 --set zero.stage=3"

pairs=()
for saved in d2_p2_t2_zero3_bf16 p2_2d4_zero1_fp32 d2_p2_interleaved_zero1_bf16 d2_offload_zero2_fp32; do
  read -r -a saved_args <<< "${layout[$saved]}"
  precision=${saved##*_}
  launch "${ranks[$saved]}" "$dir/$saved.log" "${saved_args[@]}" --set checkpoint.dir="$dir/$saved.ck" \
    --set checkpoint.every=4 --metrics "$dir/$saved.jsonl"
  "$tidal" checkpoint consolidate "$dir/$saved.ck/step-00000004" "$dir/$saved.whole" > /dev/null
  "$tidal" plan --world "${ranks[$saved]}" --configured --json "${common[@]}" "${saved_args[@]}" > "$dir/$saved.plan.json"
  # Split the load list on the entries' "name:ranks:" heads.
  mapfile -t entries < <(/usr/bin/python3 -c 'import re, sys
for m in re.finditer(r"(\w+):(\d+):(.*?)(?=\s+\w+:\d+:|$)", sys.argv[1].strip()): print("|".join(m.groups()))' \
    "${loads[$saved]}")
  for entry in "${entries[@]}"; do
    IFS='|' read -r name np args <<< "$entry"
    read -r -a load_args <<< "$args"
    load_args+=(--set train.precision="$precision")
    case=${saved}__$name
    launch "$np" "$dir/$case.again.log" "${load_args[@]}" --resume "$dir/$saved.ck/step-00000004" --stop-after 4 \
      --set checkpoint.dir="$dir/$case.ck"
    "$tidal" checkpoint consolidate "$dir/$case.ck/step-00000004" "$dir/$case.whole" > /dev/null
    launch "$np" "$dir/$case.log" "${load_args[@]}" --resume "$dir/$saved.ck/step-00000004" \
      --metrics "$dir/$case.jsonl"
    pairs+=("$saved:$case:$precision")
  done
done

/usr/bin/python3 - "$dir" "$support" "${pairs[@]}" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare, tensors
d = sys.argv[1]
tolerance = {"bf16": 2e-3, "fp32": 1e-5}

# The cost model's plan of each save: the bytes every rank writes, exactly.
for saved in sorted({pair.split(":")[0] for pair in sys.argv[3:]}):
    plan = json.loads(open(f"{d}/{saved}.plan.json").readline())["checkpoint"]["bytes_per_rank"]
    saves = [json.loads(line) for line in open(f"{d}/{saved}.jsonl") if "checkpoint_step" in line]
    written = saves[0]["checkpoint_state_bytes_per_rank"]
    assert [int(b) for b in plan] == written, f"{saved}: predicted bytes per rank {plan}, written {written}"
    print(f"{saved}: the cost model's bytes per rank equal the written ones: {written}")

worst = {}
for pair in sys.argv[3:]:
    saved, case, precision = pair.split(":")
    for f in ("model.safetensors", "optimizer.safetensors"):
        a, b = tensors(f"{d}/{saved}.whole/{f}"), tensors(f"{d}/{case}.whole/{f}")
        assert a.keys() == b.keys() and a, f"{case}/{f}: tensor names"
        differ = [k for k in a if a[k] != b[k]]
        assert not differ, f"{case}/{f}: {len(differ)} of {len(a)} tensors differ from the saved ones, e.g. {differ[:3]}"
    w, _ = compare(d, case, saved, tolerance[precision])
    worst[precision] = max(worst.get(precision, 0.0), w)
print(f"PASS: {len(sys.argv) - 3} loads of 4 saved layouts: fp32 master weights and moments bitwise equal to the "
      "saved ones; continued losses " + ", ".join(f"{p}: worst {worst[p]:.2e} <= {tolerance[p]:.0e}" for p in worst))
PY
