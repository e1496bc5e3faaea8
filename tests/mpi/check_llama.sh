#!/usr/bin/env bash
# Llama in every layout through the CLI (configs/llama-tiny.toml, made small: 4 layers, width 64,
# 8 query heads over 4 key / value heads, SwiGLU 96, a vocabulary of 130 that tensor parallelism
# pads): 1D tensor 2 and 4, 2D tensor 4 and 3D tensor 8 (fp32), sequence 4 (fp32, the ring passing
# blocks of the 4 key / value heads) and pipeline 2 x data 2 at zero.stage 2 in bf16 each
# train 10 steps whose per-step, eval and final losses equal one process's of the same model and
# precision within the declared tolerance (relative): fp32 1e-4 as check_tensor_parallel.sh (split
# GEMMs and all-reduced partial sums in other orders; measured worst about 1e-7), bf16 2e-3 as
# check_composition.sh (roundings of bf16, 2^-9 each). Composed with the rest of the engine: data 2
# x sequence 2 at ZeRO-3 with every block recomputed (bf16), data 2 x 1D tensor 2 at ZeRO-3 in
# fp16 (dynamic loss scaling; 3e-4 as check_composition.sh), Qwen2 (the same shape with biases on
# q, k and v) at data 2 x 1D tensor 2 x pipeline 2 in bf16 (2e-3), and a wider Llama at data 2, ZeRO-3
# with chunks offloaded to the host under a device cap of 30% of a rank's model data, which gives
# the uncapped run's losses bitwise, every rank moving chunks in every step. Then the error a split
# finer than the key / value heads gives: exit 2 and a message naming model.n_kv_head.
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
source "$support/run_train.sh"
run single_fp32 1
run single_bf16 1 --set train.precision=bf16
run tensor2_1d 2 --set parallel.tensor.size=2
run tensor4_1d 4 --set parallel.tensor.size=4
run tensor4_2d 4 --set parallel.tensor.size=4 --set parallel.tensor.mode=2d
run tensor8_3d 8 --set parallel.tensor.size=8 --set parallel.tensor.mode=3d
run sequence4 4 --set parallel.sequence=4
run pipeline2_data2_zero2_bf16 4 --set parallel.pipeline=2 --set parallel.data=2 --set zero.stage=2 \
  --set train.precision=bf16
run data2_sequence2_zero3_recomputed_bf16 4 --set parallel.data=2 --set parallel.sequence=2 --set zero.stage=3 \
  --set train.precision=bf16 --set train.activation_checkpointing=blocks
# Qwen2 (Llama with q, k and v biases) at data 2 x 1D tensor 2 x pipeline 2 in bf16.
run qwen2_single_bf16 1 --set model.type=qwen2 --set train.precision=bf16
run qwen2_data2_tensor2_pipeline2_bf16 8 --set model.type=qwen2 --set train.precision=bf16 --set parallel.data=2 \
  --set parallel.tensor.size=2 --set parallel.pipeline=2
run single_fp16 1 --set train.precision=fp16
run data2_tensor2_zero3_fp16 4 --set parallel.data=2 --set parallel.tensor.size=2 --set zero.stage=3 \
  --set train.precision=fp16
# Model data large beside one sequence's activations (width 256, 16 positions, one sequence per
# rank), as check_offload_parallel.sh.
offload=(--set parallel.data=2 --set zero.stage=3 --set memory.offload=chunk --set memory.chunk_size=270000
         --set model.n_embd=256 --set model.intermediate_size=512 --set model.seq_len=16 --set train.batch_size=2
         --set train.steps=6 --set train.eval_every=3)
run data2_zero3_offload_uncapped 2 "${offload[@]}" --set memory.device_limit=64GiB
cap=$(/usr/bin/python3 "$support/runs.py" device-cap "$dir" data2_zero3_offload_uncapped 0.3)
run data2_zero3_offload_capped 2 "${offload[@]}" --set memory.device_limit="$cap"
/usr/bin/python3 - "$dir" "$support" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
worst = {}
for name, reference, tolerance in [("tensor2_1d", "single_fp32", 1e-4), ("tensor4_1d", "single_fp32", 1e-4),
                                   ("tensor4_2d", "single_fp32", 1e-4), ("tensor8_3d", "single_fp32", 1e-4),
                                   ("sequence4", "single_fp32", 1e-4),
                                   ("pipeline2_data2_zero2_bf16", "single_bf16", 2e-3),
                                   ("data2_sequence2_zero3_recomputed_bf16", "single_bf16", 2e-3),
                                   ("data2_tensor2_zero3_fp16", "single_fp16", 3e-4),
                                   ("qwen2_data2_tensor2_pipeline2_bf16", "qwen2_single_bf16", 2e-3)]:
    w, summary = compare(d, name, reference, tolerance, all_steps=True)
    worst[tolerance] = max(worst.get(tolerance, 0.0), w)
compare(d, "data2_zero3_offload_capped", "data2_zero3_offload_uncapped", 0.0, all_steps=True)
import json
rows = [json.loads(l) for l in open(f"{d}/data2_zero3_offload_capped.jsonl")]
steps = [r for r in rows if "loss" in r and not r.get("summary")]
limit = rows[-1]["model_data"]["offload"]["device_limit_bytes"]
peaks = steps[-1]["device_peak_bytes_per_rank"]
moved = [[a + b for a, b in zip(r["bytes_host_to_device_per_rank"], r["bytes_device_to_host_per_rank"])]
         for r in steps]
print(f"offloaded under a cap of {limit} bytes: device peaks per rank {peaks}, bytes moved per rank and step {moved}")
assert all(p <= limit for p in peaks), "a rank's device tier passed the cap"
assert all(all(b > 0 for b in step) for step in moved), "a rank moved no chunk in a step under the cap"
print("PASS: Llama in 1D, 2D, 3D tensor, sequence, pipeline x data x ZeRO-2 (bf16), data x sequence x ZeRO-3 "
      "recomputed (bf16) and data x tensor x ZeRO-3 (fp16) = one process (worst relative difference fp32 "
      f"{worst[1e-4]:.2e} <= 1e-4, fp16 {worst[3e-4]:.2e} <= 3e-4, bf16 {worst[2e-3]:.2e} <= 2e-3); chunks offloaded "
      "under a device cap = uncapped, bitwise")
PY
expect_error "model.n_kv_head (4) must be divisible by parallel.tensor.size (8): each rank holds whole groups" 8 "${common[@]}" --set parallel.tensor.size=8
echo "PASS: a split finer than the key / value heads exits 2 naming model.n_kv_head"
