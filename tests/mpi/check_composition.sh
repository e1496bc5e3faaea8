#!/usr/bin/env bash
# Every feature composes: chunks in bf16 and fp16 (fp32 master weights; fp16 with dynamic loss
# scaling), ZeRO stages 1-3 and activation checkpointing under data, pipeline (1F1B, GPipe,
# interleaved), tensor (1D, 2D, 2.5D, 3D) and sequence parallelism, at 4 and 8 ranks, and the
# loss over blocks of positions (train.loss_chunks). Each case
# trains 10 steps (gradient clipping on, 2 evals; a learning rate low enough that the runs do not
# amplify rounding: at 1e-3 the ViT's losses jump and one process in bf16 differs from itself at
# another micro-batch size by 4e-3) and its per-step, eval and final losses equal the
# single-process chunk run of the same model, precision and seed within one declared tolerance
# per precision (relative): bf16 2e-3, fp16 3e-4, fp32 1e-5. Why: the layouts sum gradients and
# split GEMMs in other orders and round the partial results to the compute precision, so a run
# drifts from one process by roundings of bf16 (2^-9 = 2e-3 relative each) or fp16 (2^-12 =
# 2.4e-4) averaged over many elements; measured worst 7.8e-4 (bf16, 3D ViT) and 6.3e-5 (fp16).
# The same layouts on fp32 chunks (zero.stage > 0 keeps even fp32 in chunks) are the sharp check:
# leaving out the sums over a grid's replicas or the pipeline's tied ends moves bf16 only 4.5e-3,
# but fp32 by far more than its 1e-5 (measured worst 1.6e-7).
# usage: check_composition.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--set train.steps=10 --set train.batch_size=16 --set train.micro_batch_size=2 --set model.n_head=4
        --set model.n_embd=64 --set model.n_layer=4 --set model.seq_len=32 --set train.eval_every=5
        --set train.eval_batches=1 --set train.warmup_steps=2 --set train.grad_clip=0.5 --set train.lr=3e-4)
gpt=()
bert=(--set model.type=bert)
vit=(--set model.type=vit --set data.kind=images --set model.image_size=16 --set model.patch_size=4
     --set model.num_classes=8 --set train.micro_batch_size=4)
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
# run <name> <ranks> <model> <precision> <arguments...>: metrics in $dir/<name>.jsonl; the
# reference of a case is single_<model>_<precision>.
cases=()
run() {
  local name=$1 np=$2 model=$3 precision=$4; shift 4
  local -n model_args=$model
  local launch=()
  [ "$np" = 1 ] || launch=("${MPIRUN[@]}" -np "$np")
  "${launch[@]}" "$tidal" train "${common[@]}" "${model_args[@]}" --set train.precision="$precision" "$@" \
    --metrics "$dir/$name.jsonl" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
  [ "$np" = 1 ] || cases+=("$name:$model:$precision")
}
for model in gpt bert vit; do
  for precision in bf16 fp16; do run "single_${model}_$precision" 1 $model $precision; done
  run "single_${model}_fp32" 1 $model fp32 --set zero.stage=1
done
dp_tp=(--set parallel.data=2 --set parallel.pipeline=2 --set parallel.tensor.size=2)
# The 8-rank layouts in <precision>: data 2 x pipeline 2 x 1D tensor 2 at each ZeRO stage;
# pipeline 2 x 2D tensor 4 (GPT); data 2 x 2.5D tensor 4 of depth 1 (BERT); 3D tensor 8 (ViT);
# and but in fp16, sequence parallelism with ZeRO-3 and with a pipeline, and an interleaved
# pipeline at ZeRO-3 with every block recomputed in backward. fp32 keeps its chunks through
# zero.stage = 1 where a layout names no stage.
layouts_8() {
  local precision=$1 chunks=()
  [ "$precision" = fp32 ] && chunks=(--set zero.stage=1)
  for stage in 1 2 3; do
    run "d2_p2_t2_zero${stage}_$precision" 8 gpt "$precision" "${dp_tp[@]}" --set zero.stage=$stage
  done
  run "p2_2d4_$precision" 8 gpt "$precision" "${chunks[@]}" --set parallel.pipeline=2 --set parallel.tensor.size=4 \
    --set parallel.tensor.mode=2d
  run "d2_2.5d4_bert_$precision" 8 bert "$precision" --set parallel.data=2 --set parallel.tensor.size=4 \
    --set parallel.tensor.mode=2.5d --set parallel.tensor.depth=1 --set zero.stage=2
  run "3d8_vit_$precision" 8 vit "$precision" "${chunks[@]}" --set parallel.tensor.size=8 --set parallel.tensor.mode=3d
  [ "$precision" = fp16 ] && return
  run "d2_s4_zero3_$precision" 8 gpt "$precision" --set parallel.data=2 --set parallel.sequence=4 --set zero.stage=3
  run "p2_s2_d2_$precision" 8 gpt "$precision" --set parallel.pipeline=2 --set parallel.sequence=2 \
    --set parallel.data=2 --set zero.stage=2
  run "d4_p2_interleaved_zero3_recomputed_$precision" 8 gpt "$precision" --set parallel.data=4 \
    --set parallel.pipeline=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set zero.stage=3 \
    --set train.activation_checkpointing=blocks
}
for precision in bf16 fp16 fp32; do layouts_8 $precision; done
# 4 ranks: data x 1D tensor at ZeRO-3 and data x pipeline (GPipe) at ZeRO-1 in both precisions;
# data x sequence at ZeRO-2 and pipeline x 1D tensor (BERT) in bf16.
for precision in bf16 fp16; do
  run "d2_t2_zero3_$precision" 4 gpt $precision --set parallel.data=2 --set parallel.tensor.size=2 --set zero.stage=3
  run "d2_p2_gpipe_zero1_$precision" 4 gpt $precision --set parallel.data=2 --set parallel.pipeline=2 \
    --set parallel.schedule=gpipe --set zero.stage=1
done
run d2_s2_zero2_bf16 4 gpt bf16 --set parallel.data=2 --set parallel.sequence=2 --set zero.stage=2
run p2_t2_bert_bf16 4 bert bf16 --set parallel.pipeline=2 --set parallel.tensor.size=2
# The output layer and loss over blocks of positions (train.loss_chunks): on the pipeline's last
# stage, vocab-parallel, with ZeRO-3's chunks fetched per block (fp32, the sharp check); and BERT's
# MLM head under data x sequence at ZeRO-2.
run d2_p2_t2_zero3_loss_chunks_fp32 8 gpt fp32 "${dp_tp[@]}" --set zero.stage=3 --set train.loss_chunks=3
run d2_s2_zero2_loss_chunks_bert_bf16 4 bert bf16 --set parallel.data=2 --set parallel.sequence=2 --set zero.stage=2 \
  --set train.loss_chunks=3

# Checkpoints across composed layouts: saved at step 6 of 12 under data 2 x pipeline 2 x 1D tensor
# 2 in bf16 at ZeRO-3, loaded under data 4 at ZeRO-1 and under one process. Resumed at the
# checkpoint's own step (--stop-after 6) each writes what it loaded: the fp32 master weights and
# the moments must be the saved ones bitwise. Resumed to step 12, each continues the
# uninterrupted run's losses within bf16's tolerance.
saved=(--set train.precision=bf16 --set train.steps=12)
"${MPIRUN[@]}" -np 8 "$tidal" train "${common[@]}" "${saved[@]}" "${dp_tp[@]}" --set zero.stage=3 \
  --metrics "$dir/ck_whole.jsonl" > /dev/null
"${MPIRUN[@]}" -np 8 "$tidal" train "${common[@]}" "${saved[@]}" "${dp_tp[@]}" --set zero.stage=3 \
  --set checkpoint.dir="$dir/ck_saved" --stop-after 6 > /dev/null
"${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" "${saved[@]}" --set parallel.data=4 --set zero.stage=1 \
  --resume "$dir/ck_saved" --stop-after 6 --set checkpoint.dir="$dir/ck_d4" > /dev/null
"$tidal" train "${common[@]}" "${saved[@]}" --resume "$dir/ck_saved" --stop-after 6 --set checkpoint.dir="$dir/ck_one" \
  > /dev/null
"${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" "${saved[@]}" --set parallel.data=4 --set zero.stage=1 \
  --resume "$dir/ck_saved" --metrics "$dir/ck_resumed_d4.jsonl" > /dev/null
"$tidal" train "${common[@]}" "${saved[@]}" --resume "$dir/ck_saved" --metrics "$dir/ck_resumed_one.jsonl" > /dev/null

# Each checkpoint's tensors whole (tidal checkpoint consolidate) for the comparison below.
for ck in ck_saved ck_d4 ck_one; do
  "$tidal" checkpoint consolidate "$dir/$ck/step-00000006" "$dir/$ck.whole" > /dev/null
done

grep -q "zero.stage 3 over 8 data x sequence ranks" "$dir/d2_s4_zero3_bf16.log" ||
  { cat "$dir/d2_s4_zero3_bf16.log"; echo "FAIL: the sequence ring is not in the chunk group"; exit 1; }
/usr/bin/python3 - "$dir" "$support" "${cases[@]}" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from runs import compare, tensors
d = sys.argv[1]
tolerance = {"bf16": 2e-3, "fp16": 3e-4, "fp32": 1e-5}
worst = {"bf16": 0.0, "fp16": 0.0, "fp32": 0.0}
for case in sys.argv[3:]:
    name, model, precision = case.split(":")
    w, summary = compare(d, name, f"single_{model}_{precision}", tolerance[precision], all_steps=True)
    assert summary["precision"] == precision
    worst[precision] = max(worst[precision], w)
compare(d, "ck_resumed_d4", "ck_whole", tolerance["bf16"])
compare(d, "ck_resumed_one", "ck_whole", tolerance["bf16"])
for f in ("model.safetensors", "optimizer.safetensors"):
    saved = tensors(f"{d}/ck_saved.whole/{f}")
    for again in ("ck_d4", "ck_one"):
        loaded = tensors(f"{d}/{again}.whole/{f}")
        assert loaded.keys() == saved.keys(), f"{again}/{f}: tensor names"
        differ = [k for k in saved if loaded[k] != saved[k]]
        assert not differ, f"{again}/{f}: {len(differ)} tensors differ from the saved ones, e.g. {differ[:3]}"
    print(f"{f}: {len(saved)} tensors saved under data 2 x pipeline 2 x tensor 2 (ZeRO-3) and loaded under data 4 "
          f"(ZeRO-1) and one process: bitwise equal")
print(f"PASS: {len(sys.argv) - 3} composed layouts = one process "
      + ", ".join(f"{p}: worst {worst[p]:.2e} <= {tolerance[p]:.0e}" for p in worst))
PY
