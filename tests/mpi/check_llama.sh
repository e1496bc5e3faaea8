#!/usr/bin/env bash
# Llama in every layout through the CLI (configs/llama-tiny.toml, made small: 4 layers, width 64,
# 8 query heads over 4 key / value heads, SwiGLU 96, a vocabulary of 130 that tensor parallelism
# pads): 1D tensor 2 and 4, 2D tensor 4 and 3D tensor 8 (fp32), sequence 4 (fp32, multi-head:
# grouped heads in the ring are not built yet) and pipeline 2 x data 2 at zero.stage 2 in bf16 each
# train 10 steps whose per-step, eval and final losses equal one process's of the same model and
# precision within the declared tolerance (relative): fp32 1e-4 as check_tensor_parallel.sh (split
# GEMMs and all-reduced partial sums in other orders; measured worst about 1e-7), bf16 2e-3 as
# check_composition.sh (roundings of bf16, 2^-9 each). Then the error a split finer than the key /
# value heads gives: exit 2 and a message naming model.n_kv_head.
# usage: check_llama.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config=$(cd "$(dirname "$0")/../.." && pwd)/configs/llama-tiny.toml
common=(-c "$config" --set train.steps=10 --set train.batch_size=8 --set model.n_layer=4 --set model.n_embd=64
        --set model.n_head=8 --set model.n_kv_head=4 --set model.intermediate_size=96 --set model.vocab_size=130
        --set model.seq_len=32 --set train.eval_every=5 --set train.eval_batches=1 --set train.warmup_steps=2
        --set train.grad_clip=0.5 --set train.lr=3e-4)
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
source "$support/expect_error.sh"
# run <name> <ranks> <arguments...>: metrics in $dir/<name>.jsonl.
run() {
  local name=$1 np=$2; shift 2
  local launch=()
  [ "$np" = 1 ] || launch=("${MPIRUN[@]}" -np "$np")
  "${launch[@]}" "$tidal" train "${common[@]}" "$@" --metrics "$dir/$name.jsonl" > "$dir/$name.log" 2>&1 ||
    { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
}
mha=(--set model.n_kv_head=8)
run single_fp32 1
run single_mha 1 "${mha[@]}"
run single_bf16 1 --set train.precision=bf16
run tensor2_1d 2 --set parallel.tensor.size=2
run tensor4_1d 4 --set parallel.tensor.size=4
run tensor4_2d 4 --set parallel.tensor.size=4 --set parallel.tensor.mode=2d
run tensor8_3d 8 --set parallel.tensor.size=8 --set parallel.tensor.mode=3d
run sequence4 4 "${mha[@]}" --set parallel.sequence=4
run pipeline2_data2_zero2_bf16 4 --set parallel.pipeline=2 --set parallel.data=2 --set zero.stage=2 \
  --set train.precision=bf16
/usr/bin/python3 - "$dir" "$support" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
worst = {}
for name, reference, tolerance in [("tensor2_1d", "single_fp32", 1e-4), ("tensor4_1d", "single_fp32", 1e-4),
                                   ("tensor4_2d", "single_fp32", 1e-4), ("tensor8_3d", "single_fp32", 1e-4),
                                   ("sequence4", "single_mha", 1e-4),
                                   ("pipeline2_data2_zero2_bf16", "single_bf16", 2e-3)]:
    w, summary = compare(d, name, reference, tolerance, all_steps=True)
    worst[tolerance] = max(worst.get(tolerance, 0.0), w)
print("PASS: Llama in 1D, 2D, 3D tensor, sequence and pipeline x data x ZeRO-2 (bf16) = one process "
      f"(worst relative difference fp32 {worst[1e-4]:.2e} <= 1e-4, bf16 {worst[2e-3]:.2e} <= 2e-3)")
PY
expect_error "model.n_kv_head (4) must be divisible by parallel.tensor.size (8): each rank holds whole groups" 8 "${common[@]}" --set parallel.tensor.size=8
echo "PASS: a split finer than the key / value heads exits 2 naming model.n_kv_head"
