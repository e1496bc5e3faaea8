#!/usr/bin/env bash
# ZeRO on chunks trains like plain data parallelism through the CLI, at parallel.data = 4: GPT
# (dropout and clipping on, several communication groups of chunks, 2 micro-batches per rank
# accumulated) for 12 steps.
# - fp32: zero.stage 1, 2 and 3 give plain data parallelism's per-step and eval losses within
#   1e-5 (relative; the gradients are summed in another order), and so does stage 3 with one
#   micro-batch per rank and activation checkpointing. Stage 3 with zero.fetch = "broadcast"
#   (ZeRO-DP's per-chunk broadcasts instead of all-gathers) gives stage 3's losses exactly.
# - bf16: stages 1, 2 and 3 give stage 0's (plain data parallelism on bf16 chunks) within 1e-3
#   (declared: bf16 keeps 8 significant bits, so one rounding is up to 2^-9 = 2e-3 relative; the
#   reduce-scatter sums the bf16 gradients in another order than the all-reduce); bf16 and fp16
#   stay within 2e-2 of fp32 (measured values printed).
# - fp16 with a forced overflow (train.loss_scale = 2^24: the scaled gradient passes fp16's
#   65504): the first steps are skipped while the scale halves (on every rank: the overflow check
#   is the gradient norm summed over them), then training recovers - the scale stays, most steps
#   apply and the loss goes on falling. The same run at the default scale (2^16) skips nothing.
# - checkpoints: a stage-3 bf16 run stopped at step 6 resumes to the uninterrupted run's losses
#   exactly; a stage-3 fp32 checkpoint of 4 ranks resumes in one process (whole tensors).
# usage: check_zero.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--set train.steps=12 --set train.batch_size=16 --set train.micro_batch_size=2 --set model.dropout=0.1
        --set train.eval_every=6 --set train.eval_batches=2 --set train.warmup_steps=3 --set train.grad_clip=0.5
        --set model.n_layer=3 --set memory.chunk_size=16384 --set parallel.data=4)
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
run() {  # <name> <arguments...>
  local name=$1; shift
  "${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" "$@" --metrics "$dir/$name.jsonl" > "$dir/$name.log"
}
run plain
for stage in 1 2 3; do run "fp32_stage$stage" --set zero.stage=$stage; done
run fp32_stage3_broadcast --set zero.stage=3 --set zero.fetch=broadcast
run plain_whole --set train.micro_batch_size=0
run fp32_stage3_whole_recomputed --set zero.stage=3 --set train.micro_batch_size=0 \
  --set train.activation_checkpointing=blocks
for stage in 0 1 2 3; do run "bf16_stage$stage" --set zero.stage=$stage --set train.precision=bf16; done
run fp16_stage2 --set zero.stage=2 --set train.precision=fp16
run fp16_overflow --set zero.stage=2 --set train.precision=fp16 --set train.loss_scale=16777216
grep -q "step 1: gradient overflowed in fp16 at loss scale 16777216: step skipped" "$dir/fp16_overflow.log" ||
  { cat "$dir/fp16_overflow.log"; echo "FAIL: no overflow line in the progress"; exit 1; }
grep -q "zero.stage 3 over 4 data ranks: optimizer states, gradients and parameters sharded" "$dir/fp32_stage3.log" ||
  { cat "$dir/fp32_stage3.log"; echo "FAIL: no chunk line in the progress"; exit 1; }
grep -q "parameters sharded, parameters by broadcast" "$dir/fp32_stage3_broadcast.log" ||
  { cat "$dir/fp32_stage3_broadcast.log"; echo "FAIL: zero.fetch not in the progress"; exit 1; }
# Checkpoints: interrupted at step 6 and resumed, and a 4-rank stage-3 checkpoint in one process.
"${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" --set zero.stage=3 --set train.precision=bf16 \
  --set checkpoint.dir="$dir/ck_bf16" --stop-after 6 > /dev/null
run bf16_stage3_resumed --set zero.stage=3 --set train.precision=bf16 --resume "$dir/ck_bf16"
"${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" --set zero.stage=3 --set checkpoint.dir="$dir/ck_fp32" \
  --stop-after 6 > /dev/null
"$tidal" train "${common[@]}" --set parallel.data=1 --resume "$dir/ck_fp32" --metrics "$dir/fp32_resumed_in_one.jsonl" \
  > /dev/null
/usr/bin/python3 - "$dir" "$support" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from runs import compare, read
d = sys.argv[1]
for stage in (1, 2, 3):
    compare(d, f"fp32_stage{stage}", "plain", 1e-5, all_steps=True)
compare(d, "fp32_stage3_whole_recomputed", "plain_whole", 1e-5, all_steps=True)
compare(d, "fp32_stage3_broadcast", "fp32_stage3", 0.0, all_steps=True)
for stage in (1, 2, 3):
    compare(d, f"bf16_stage{stage}", "bf16_stage0", 1e-3, all_steps=True)
compare(d, "bf16_stage0", "plain", 2e-2, all_steps=True)
compare(d, "fp16_stage2", "plain", 2e-2, all_steps=True)
compare(d, "bf16_stage3_resumed", "bf16_stage3", 0.0)
compare(d, "fp32_resumed_in_one", "plain", 1e-5)

steps, _, summary = read(d, "fp16_stage2")
assert summary["skipped_steps"] == 0, "fp16 at the default loss scale should not overflow here"
import json
rows = [json.loads(l) for l in open(f"{d}/fp16_overflow.jsonl")]
records = [r for r in rows if "loss" in r and not r.get("summary")]
skipped = [r["step"] for r in records if r["skipped"]]
applied = [r["step"] for r in records if not r["skipped"]]
scales = [r["loss_scale"] for r in records]
print(f"fp16 with loss scale 2^24: steps {skipped} skipped, scales {scales}, "
      f"{len(applied)} steps applied; final eval {rows[-1]['final_loss']:.4f}, without overflow "
      f"{summary['final_loss']:.4f}")
assert skipped and skipped[0] == 1, "the first step overflows"
for i, r in enumerate(records[:-1]):  # halved after each overflow, kept after a finite step
    assert records[i + 1]["loss_scale"] == r["loss_scale"] / (2 if r["skipped"] else 1), f"scale after step {r['step']}"
first_applied = applied[0]
assert len(applied) >= 6, "most steps apply once the scale has come down"
assert rows[-1]["skipped_steps"] == len(skipped)
recovered = records[first_applied - 1]["loss"]
assert rows[-1]["final_loss"] < recovered, "training goes on after the recovery"
PY
echo "zero checks passed"
