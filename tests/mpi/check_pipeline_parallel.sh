#!/usr/bin/env bash
# Pipeline parallelism trains exactly like one process through the CLI: GPT (4 layers, 8
# micro-batches, dropout and clipping on) for 20 steps under GPipe and 1F1B at pipeline 2 and 4
# and interleaved (2 chunks per rank) at pipeline 2, and the hybrids data 2 x pipeline 2,
# pipeline 2 x tensor 2 (1D, with and without scatter-gather) and pipeline 2 x sequence 2, give
# per-step and eval losses within 1e-4 (relative) of one process; so do stages balanced by
# parameters and by measured time, checkpointed runs of 2 blocks as stage units, and runs resumed
# across layouts (a checkpoint saved under pipeline 2 x tensor 2 resumes in one process, one
# saved by one process under pipeline 4). Scatter-gather halves the bytes between stages at
# tensor 2; 1F1B's activation peak on the first stage is below GPipe's. For 10 steps on 8 ranks:
# data 2 x pipeline 2 x tensor 2 (1D), pipeline 2 x tensor 4 (2D), data 2 x tensor 4 (2.5D,
# depth 1), pipeline 2 x sequence 4 and tensor 8 (3D). A schedule or split that cannot run stops
# at start-up with exit code 2 and one message naming the keys.
# usage: check_pipeline_parallel.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--set train.steps=20 --set train.batch_size=16 --set train.micro_batch_size=2 --set model.dropout=0.1
        --set train.eval_every=10 --set train.eval_batches=2 --set train.warmup_steps=5 --set train.grad_clip=0.5
        --set model.n_head=4 --set model.n_embd=64 --set model.n_layer=4)
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
source "$support/expect_error.sh"
"$tidal" train "${common[@]}" --metrics "$dir/single.jsonl" > /dev/null
run() {  # <name> <ranks> <arguments...>
  local name=$1 np=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$tidal" train "${common[@]}" "$@" --metrics "$dir/$name.jsonl" > "$dir/$name.log"
}
run gpipe_p2 2 --set parallel.pipeline=2 --set parallel.schedule=gpipe
run 1f1b_p2 2 --set parallel.pipeline=2 --set parallel.schedule=1f1b
run gpipe_p4 4 --set parallel.pipeline=4 --set parallel.schedule=gpipe
run 1f1b_p4 4 --set parallel.pipeline=4 --set parallel.schedule=1f1b
run interleaved_p2 2 --set parallel.pipeline=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2
run data2_p2 4 --set parallel.pipeline=2 --set parallel.data=2
run p2_tensor2 4 --set parallel.pipeline=2 --set parallel.tensor.size=2
run p2_sequence2 4 --set parallel.pipeline=2 --set parallel.sequence=2
run p2_tensor2_whole 4 --set parallel.pipeline=2 --set parallel.tensor.size=2 --set parallel.scatter_gather=false
run p4_by_parameters 4 --set parallel.pipeline=4 --set parallel.partition=parameters
run p2_by_time 2 --set parallel.pipeline=2 --set parallel.partition=time
run p2_runs_of_2 2 --set parallel.pipeline=2 --set train.activation_checkpointing=every_k \
  --set train.activation_checkpointing_k=2
# Checkpoints across layouts: saved at step 10 under one, resumed under the other.
"${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" --set parallel.pipeline=2 --set parallel.tensor.size=2 \
  --set checkpoint.dir="$dir/ck_p2t2" --stop-after 10 > /dev/null
"$tidal" train "${common[@]}" --resume "$dir/ck_p2t2" --metrics "$dir/resume_p2t2_to_1.jsonl" > /dev/null
"$tidal" train "${common[@]}" --set checkpoint.dir="$dir/ck_1" --stop-after 10 > /dev/null
run resume_1_to_p4 4 --set parallel.pipeline=4 --resume "$dir/ck_1"
# The hybrids of 8 ranks, 10 steps each (dropout off: the grid modes draw their own masks).
hybrid=(--set train.steps=10 --set model.dropout=0 --set train.eval_every=5 --set train.micro_batch_size=4)
"$tidal" train "${common[@]}" "${hybrid[@]}" --metrics "$dir/single_hybrid.jsonl" > /dev/null
run d2_p2_t2 8 "${hybrid[@]}" --set parallel.data=2 --set parallel.pipeline=2 --set parallel.tensor.size=2
run p2_t4_2d 8 "${hybrid[@]}" --set parallel.pipeline=2 --set parallel.tensor.size=4 --set parallel.tensor.mode=2d
run d2_t4_2.5d 8 "${hybrid[@]}" --set parallel.data=2 --set parallel.tensor.size=4 --set parallel.tensor.mode=2.5d
run p2_s4 8 "${hybrid[@]}" --set parallel.pipeline=2 --set parallel.sequence=4
run t8_3d 8 "${hybrid[@]}" --set parallel.tensor.size=8 --set parallel.tensor.mode=3d
grep -q "pipeline: 4 stages, schedule 1f1b, layers per virtual stage 2 | 1 | 1 | 4 (balanced by layers), 8 micro-batches" \
  "$dir/1f1b_p4.log" || { cat "$dir/1f1b_p4.log"; echo "FAIL: no pipeline line in the progress"; exit 1; }
/usr/bin/python3 - "$dir" "$support" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from runs import compare
worst_all = 0.0
summaries = {}
for name in ["gpipe_p2", "1f1b_p2", "gpipe_p4", "1f1b_p4", "interleaved_p2", "data2_p2", "p2_tensor2", "p2_sequence2",
             "p2_tensor2_whole", "p4_by_parameters", "p2_by_time", "p2_runs_of_2"]:
    # Summation order differs (gradients summed over stages' ends, replicas, split GEMMs).
    worst, summaries[name] = compare(sys.argv[1], name, "single", 1e-4, all_steps=True)
    worst_all = max(worst_all, worst)
for name in ["resume_p2t2_to_1", "resume_1_to_p4"]:
    worst, _ = compare(sys.argv[1], name, "single", 1e-4)
    worst_all = max(worst_all, worst)
sent = {k: summaries[k]["communication"]["pipeline"]["send"]["bytes_sent"] for k in ["p2_tensor2", "p2_tensor2_whole"]}
ratio = sent["p2_tensor2_whole"] / sent["p2_tensor2"]
print(f"bytes sent between stages by rank 0, pipeline 2 x tensor 2: {sent['p2_tensor2_whole']:.0f} whole, "
      f"{sent['p2_tensor2']:.0f} scatter-gathered (ratio {ratio:.4f})")
assert abs(ratio - 2) < 0.01, "scatter-gather should halve the bytes between stages at tensor 2"
peak = {k: summaries[k]["peak_bytes"]["activations"] for k in ["gpipe_p4", "1f1b_p4"]}
print(f"activation peak of stage 0 at pipeline 4, 8 micro-batches: gpipe {peak['gpipe_p4']}, 1f1b {peak['1f1b_p4']}")
assert peak["1f1b_p4"] < peak["gpipe_p4"], "1F1B keeps fewer micro-batches in flight than GPipe"
for name in ["d2_p2_t2", "p2_t4_2d", "d2_t4_2.5d", "p2_s4", "t8_3d"]:
    worst, _ = compare(sys.argv[1], name, "single_hybrid", 1e-4, all_steps=True)
    worst_all = max(worst_all, worst)
print(f"PASS: pipeline parallel and 8-rank hybrids = one process (worst relative difference {worst_all:.2e} <= 1e-4)")
PY
expect_error "the 5 micro-batches per step" 2 --set parallel.pipeline=2 --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set train.batch_size=10 --set train.micro_batch_size=2 --set model.n_layer=4
expect_error "model.n_layer (2) must be >= parallel.pipeline (4)" 4 --set parallel.pipeline=4 --set model.n_layer=2
expect_error "8 pipeline stages (parallel.pipeline x parallel.virtual_stages = 2 x 4) for 4 block layers" 2 --set parallel.pipeline=2 \
  --set parallel.schedule=interleaved --set parallel.virtual_stages=4 --set model.n_layer=4
expect_error "parallel.virtual_stages = 2 needs parallel.schedule = \"interleaved\"" 2 --set parallel.pipeline=2 \
  --set parallel.virtual_stages=2
expect_error "for 2 block layers (4 transformer blocks in checkpointed runs of train.activation_checkpointing_k = 3)" \
  2 --set parallel.pipeline=4 --set model.n_layer=4 --set train.activation_checkpointing=every_k \
  --set train.activation_checkpointing_k=3
expect_error "parallel.partition = \"flops\" is not one of layers | parameters | time" 2 --set parallel.pipeline=2 --set parallel.partition=flops
echo "PASS: start-up errors for pipeline parallelism"
