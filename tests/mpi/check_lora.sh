#!/usr/bin/env bash
# LoRA (finetune.method = "lora", adapters on all seven of Llama's linears, rank 4) in parallel
# layouts through the CLI, on configs/llama-tiny.toml made small (4 layers, width 64, 8 query heads
# over 4 key / value heads, SwiGLU 96, a vocabulary of 130): 1D tensor 2, 2D tensor 4, 2.5D tensor 8
# (depth 2), 3D tensor 8, pipeline 2, ring 2 and Ulysses 2 (fp32), data 2 x 1D tensor 2 at ZeRO-2,
# data 2 x 2D tensor 4 at ZeRO-2 and pipeline 2 x data 2 at ZeRO-3 (bf16), and a Mixtral with
# adapters on its experts (w1, w2, w3) at data 2 x expert 2 (fp32) each train 10 steps whose
# per-step, eval and final losses equal one process's of the same precision within the declared
# tolerance (relative; as check_llama.sh: fp32 1e-4, bf16 2e-3), and every run trains the same
# number of parameters (the adapters'); recomputing every block (activation checkpointing) gives
# the losses bitwise.
# usage: check_lora.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config=$(cd "$(dirname "$0")/../.." && pwd)/configs/llama-tiny.toml
common=(-c "$config" --set train.steps=10 --set train.batch_size=8 --set model.n_layer=4 --set model.n_embd=64
        --set model.n_head=8 --set model.n_kv_head=4 --set model.intermediate_size=96 --set model.vocab_size=130
        --set model.seq_len=32 --set train.eval_every=5 --set train.eval_batches=1 --set train.warmup_steps=2
        --set train.lr=3e-3 --set finetune.method=lora --set finetune.lora_rank=4
        --set finetune.lora_targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
source "$support/run_train.sh"
run single_fp32 1
run single_bf16 1 --set train.precision=bf16
run tensor2_1d 2 --set parallel.tensor.size=2
run tensor4_2d 4 --set parallel.tensor.size=4 --set parallel.tensor.mode=2d
run tensor8_2p5d 8 --set parallel.tensor.size=8 --set parallel.tensor.mode=2.5d --set parallel.tensor.depth=2
run tensor8_3d 8 --set parallel.tensor.size=8 --set parallel.tensor.mode=3d
run pipeline2 2 --set parallel.pipeline=2
run ring2 2 --set parallel.sequence=2
run ulysses2 2 --set parallel.sequence=2 --set parallel.sequence_mode=ulysses
run recomputed 1 --set train.activation_checkpointing=blocks
run data2_tensor2_zero2_bf16 4 --set parallel.data=2 --set parallel.tensor.size=2 --set zero.stage=2 \
  --set train.precision=bf16
run data2_tensor4_2d_zero2_bf16 8 --set parallel.data=2 --set parallel.tensor.size=4 --set parallel.tensor.mode=2d \
  --set zero.stage=2 --set train.precision=bf16
run pipeline2_data2_zero3_bf16 4 --set parallel.pipeline=2 --set parallel.data=2 --set zero.stage=3 \
  --set train.precision=bf16
# Mixtral's experts adapted (w1, w2, w3) beside q_proj, the experts spread over 2 ranks.
mixtral=(--set model.type=mixtral --set model.experts=4 --set finetune.lora_targets=q_proj,w1,w2,w3)
run mixtral_single 1 "${mixtral[@]}"
run mixtral_expert2 2 "${mixtral[@]}" --set parallel.data=2 --set parallel.expert=2
/usr/bin/python3 - "$dir" "$support" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
worst = {}
compare(d, "recomputed", "single_fp32", 0.0, all_steps=True)  # bitwise
for name, reference, tolerance in [("tensor2_1d", "single_fp32", 1e-4), ("tensor4_2d", "single_fp32", 1e-4),
                                   ("tensor8_2p5d", "single_fp32", 1e-4), ("tensor8_3d", "single_fp32", 1e-4),
                                   ("pipeline2", "single_fp32", 1e-4),
                                   ("ring2", "single_fp32", 1e-4), ("ulysses2", "single_fp32", 1e-4),
                                   ("data2_tensor2_zero2_bf16", "single_bf16", 2e-3),
                                   ("data2_tensor4_2d_zero2_bf16", "single_bf16", 2e-3),
                                   ("pipeline2_data2_zero3_bf16", "single_bf16", 2e-3),
                                   ("mixtral_expert2", "mixtral_single", 1e-4)]:
    w, summary = compare(d, name, reference, tolerance, all_steps=True)
    worst[tolerance] = max(worst.get(tolerance, 0.0), w)
trained = {json.loads(l).get("parameters_trained") for n in ("single_fp32", "tensor2_1d", "data2_tensor2_zero2_bf16",
                                                             "tensor4_2d", "tensor8_2p5d", "tensor8_3d")
           for l in open(f"{d}/{n}.jsonl") if '"summary"' in l}
# 4 layers x (q 64 + k 32 + v 32 + o 64 + gate 96 + up 96 + down 64 rows, and A of 64, 64, 64, 64, 64, 64, 96
# columns) x rank 4
expected = 4 * 4 * ((64 + 32 + 32 + 64 + 96 + 96 + 64) + (6 * 64 + 96))
assert trained == {expected}, f"trained parameters {trained}, expected {expected}"
first = [json.loads(l)["loss"] for l in open(f"{d}/single_fp32.jsonl") if '"loss"' in l and '"summary"' not in l]
assert first[-1] < first[0], f"the adapters did not learn: losses {first}"
print(f"PASS: LoRA in 1D tensor 2, 2D tensor 4, 2.5D tensor 8, 3D tensor 8, pipeline 2, ring 2, Ulysses 2, data 2 x tensor 2 x ZeRO-2 and x 2D tensor 4 x ZeRO-2 "
      f"(bf16), pipeline 2 x data 2 x ZeRO-3 (bf16), Mixtral's experts under expert 2 = one process; recomputed blocks bitwise (worst relative difference fp32 {worst[1e-4]:.2e} <= 1e-4, bf16 {worst[2e-3]:.2e} <= "
      f"2e-3), {expected} parameters trained in each")
PY
