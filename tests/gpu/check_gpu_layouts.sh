#!/usr/bin/env bash
# The parallel layouts on the GPU (issue 31, Part B item 4): 2, 4 and 8 ranks sharing one GPU,
# their collectives over MPI through pinned host buffers (comm/staged_communicator.h), train
# with train.device = "cuda" and give the one-GPU run's per-step, eval and final losses of the
# same model, precision and seed within the tolerances of tests/mpi/check_composition.sh, for the
# same reasons (relative: bf16 2e-3, fp32 1e-5; the layouts sum and split in other orders). fp32
# keeps its chunks (zero.stage >= 1): the sharp check, where leaving out a sum moves the loss by far
# more than 1e-5. Covered: data parallelism at ZeRO 0-3; chunk offload (pinned host memory beside
# the GPU's, under a cap per rank: ranks sharing a GPU each need their memory.device_limit);
# pipelines (1F1B, GPipe); 1D tensor parallelism with the vocab-parallel embedding and loss; 2D,
# 2.5D and 3D tensor parallelism (their feature-split norms); ring and Ulysses sequence
# parallelism; and compositions of them.
# Exits 77 (ctest: skipped) where no GPU is visible.
# usage: check_gpu_layouts.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
if ! "$tidal" info | grep -q "train.device=cuda"; then
  echo "skipped: $("$tidal" info | grep 'gpu:')"
  exit 77
fi
MPIRUN=("$@")
# One GPU, shared by every rank, on machines with more too: what the staged path is for.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
common=(--set train.device=cuda --set train.steps=8 --set train.batch_size=16 --set train.micro_batch_size=2
        --set model.n_head=4 --set model.n_embd=64 --set model.n_layer=4 --set model.seq_len=32
        --set train.eval_every=4 --set train.eval_batches=1 --set train.warmup_steps=2 --set train.grad_clip=0.5
        --set train.lr=3e-4)
gpt=()
bert=(--set model.type=bert)
vit=(--set model.type=vit --set data.kind=images --set model.image_size=16 --set model.patch_size=4
     --set model.num_classes=8 --set train.micro_batch_size=4)
cases=()
# run <name> <ranks> <model> <precision> <arguments...>: metrics in $dir/<name>.jsonl; the
# reference of a case is single_<model>_<precision>.
run() {
  local name=$1 np=$2 model=$3 precision=$4; shift 4
  local -n model_args=$model
  local launch=() chunks=()
  [ "$np" = 1 ] || launch=("${MPIRUN[@]}" -np "$np")
  [ "$precision" = fp32 ] && chunks=(--set zero.stage=1)
  local t0=$SECONDS
  "${launch[@]}" "$tidal" train "${common[@]}" "${model_args[@]}" --set train.precision="$precision" "${chunks[@]}" \
    "$@" --metrics "$dir/$name.jsonl" > "$dir/$name.log" 2>&1 || { tail -40 "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
  echo "ran $name on $np rank(s) in $((SECONDS - t0)) s"
  [ "$np" = 1 ] || cases+=("$name:$model:$precision")
}
run single_gpt_bf16 1 gpt bf16
run single_gpt_fp32 1 gpt fp32
run single_bert_bf16 1 bert bf16
run single_vit_bf16 1 vit bf16
grep -q "collectives:" "$dir/single_gpt_bf16.log" && { echo "FAIL: one process should not stage"; exit 1; }
# 2 ranks
run d2_bf16 2 gpt bf16 --set parallel.data=2
run d2_zero3_fp32 2 gpt fp32 --set parallel.data=2 --set zero.stage=3
run p2_fp32 2 gpt fp32 --set parallel.pipeline=2
run t2_fp32 2 gpt fp32 --set parallel.tensor.size=2
run s2_ring_fp32 2 gpt fp32 --set parallel.sequence=2
run s2_ulysses_bf16 2 gpt bf16 --set parallel.sequence=2 --set parallel.sequence_mode=ulysses
# 4 ranks
run d2_t2_zero3_bf16 4 gpt bf16 --set parallel.data=2 --set parallel.tensor.size=2 --set zero.stage=3
run d2_p2_gpipe_zero1_bf16 4 gpt bf16 --set parallel.data=2 --set parallel.pipeline=2 --set parallel.schedule=gpipe \
  --set zero.stage=1
run d2_s2_zero2_bf16 4 gpt bf16 --set parallel.data=2 --set parallel.sequence=2 --set zero.stage=2
run p2_t2_bert_bf16 4 bert bf16 --set parallel.pipeline=2 --set parallel.tensor.size=2
run 2d4_fp32 4 gpt fp32 --set parallel.tensor.size=4 --set parallel.tensor.mode=2d
run 2.5d4_bert_bf16 4 bert bf16 --set parallel.tensor.size=4 --set parallel.tensor.mode=2.5d --set parallel.tensor.depth=1
run d2_p2_offload_fp32 4 gpt fp32 --set parallel.data=2 --set parallel.pipeline=2 --set zero.stage=2 \
  --set memory.offload=chunk --set memory.device_limit=256MiB
# 8 ranks
run 3d8_vit_bf16 8 vit bf16 --set parallel.tensor.size=8 --set parallel.tensor.mode=3d
run d2_p2_t2_zero3_bf16 8 gpt bf16 --set parallel.data=2 --set parallel.pipeline=2 --set parallel.tensor.size=2 \
  --set zero.stage=3
# The ranks share the GPU, so auto chose the staged path; NCCL asked for is refused by name.
grep -q "collectives: MPI, with the GPU's tensors staged" "$dir/d2_bf16.log" ||
  { cat "$dir/d2_bf16.log"; echo "FAIL: two ranks on one GPU did not stage their collectives"; exit 1; }
rc=0
"${MPIRUN[@]}" -np 2 "$tidal" train "${common[@]}" --set parallel.data=2 --set parallel.gpu_collectives=nccl \
  > "$dir/nccl_shared.log" 2>&1 || rc=$?
if [ "$rc" != 2 ] || ! grep -q 'parallel.gpu_collectives = "nccl" needs a GPU for every rank' "$dir/nccl_shared.log"; then
  cat "$dir/nccl_shared.log"; echo "FAIL: NCCL on a shared GPU: exit $rc, not 2 with the key named"; exit 1
fi
# Offload on a shared GPU without a cap per rank is refused: each rank would claim the GPU's free memory.
rc=0
"${MPIRUN[@]}" -np 2 "$tidal" train "${common[@]}" --set parallel.data=2 --set memory.offload=chunk \
  > "$dir/offload_shared.log" 2>&1 || rc=$?
if [ "$rc" != 2 ] || ! grep -q 'ranks sharing 1 GPU(s) on rank 0.s node: set memory.device_limit' "$dir/offload_shared.log"; then
  cat "$dir/offload_shared.log"; echo "FAIL: offload on a shared GPU without memory.device_limit: exit $rc, not 2"; exit 1
fi
/usr/bin/env python3 - "$dir" "$support" "${cases[@]}" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
tolerance = {"bf16": 2e-3, "fp32": 1e-5}
worst = {"bf16": 0.0, "fp32": 0.0}
for case in sys.argv[3:]:
    name, model, precision = case.split(":")
    w, summary = compare(d, name, f"single_{model}_{precision}", tolerance[precision], all_steps=True)
    assert summary["precision"] == precision
    worst[precision] = max(worst[precision], w)
print("worst relative step-loss difference from one GPU:", ", ".join(f"{p} {w:.2e}" for p, w in worst.items()))
PY
echo "PASS: every layout on the shared GPU gives the one-GPU losses"
