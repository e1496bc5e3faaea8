#!/usr/bin/env bash
# Mixtral and Qwen2-MoE (configs/mixtral-tiny.toml made small: 4 layers, width 64, 8 query heads
# over 4 key / value heads, 4 experts of SwiGLU width 48, 2 a token, the load-balancing loss at
# 0.02 and the z-loss at 0.001 in the loss) in the engine's layouts, each 10 steps whose per-step,
# eval and final losses equal one process's of the same model and precision within the declared
# tolerance (relative; fp32 1e-4 and bf16 2e-3 as check_llama.sh). Every run takes micro-batches of
# 4 samples, so the routers' statistics (means over a micro-batch) cover the same tokens in every
# layout: data 2, pipeline 2, 1D tensor 2 (each expert split), sequence 2 (ring; the statistics
# summed over the ring), data 2 x ZeRO-3 in bf16 with every block recomputed, Qwen2-MoE (its shared
# expert) at data 2 x pipeline 2 x 1D tensor 2 in bf16, and chunks offloaded under a device cap,
# bitwise equal to uncapped. Expert parallelism (parallel.expert, carved from the data ranks): expert
# 2, 4 and 8, expert 2 x data 4, expert 2 x pipeline 2, expert 2 x 1D tensor 2, expert 2 x sequence 2
# (fp32 tensors), and on chunks expert 4 at ZeRO-1 (fp32), expert 2 x data 4 at ZeRO-3 (bf16), and
# expert 2 offloaded under a device cap (bitwise equal to uncapped; its states partly on disk at
# ZeRO-2, and that run's checkpoint loaded without offload bitwise). Then the errors: a 2D tensor
# layout and an expert group larger than the data ranks, each exit 2 naming the key. Every step's
# all-to-all bytes equal the formula over the rows the metrics report.
# usage: check_moe.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config=$(cd "$(dirname "$0")/../.." && pwd)/configs/mixtral-tiny.toml
common=(-c "$config" --set train.steps=10 --set train.batch_size=8 --set train.micro_batch_size=4
        --set model.n_layer=4 --set model.n_embd=64 --set model.n_head=8 --set model.n_kv_head=4
        --set model.intermediate_size=48 --set model.experts=4 --set model.vocab_size=130 --set model.seq_len=32
        --set model.router_aux_loss_coef=0.02 --set model.router_z_loss_coef=0.001 --set train.eval_every=5
        --set train.eval_batches=1 --set train.warmup_steps=2 --set train.grad_clip=0.5 --set train.lr=3e-3)
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
source "$support/expect_error.sh"
source "$support/run_train.sh"
run single_fp32 1
run single_bf16 1 --set train.precision=bf16
run data2 2 --set parallel.data=2
run pipeline2 2 --set parallel.pipeline=2
run tensor2_1d 2 --set parallel.tensor.size=2
run sequence2 2 --set parallel.sequence=2
run data2_zero3_recomputed_bf16 2 --set parallel.data=2 --set zero.stage=3 --set train.precision=bf16 \
  --set train.activation_checkpointing=blocks
# Expert parallelism: the experts split over 2, 4 and 8 data ranks, over 2 of 4 (each expert's
# gradient summed over the two ranks that hold it), beside a pipeline and 1D tensor parallelism.
run expert2 2 --set parallel.data=2 --set parallel.expert=2
run expert4 4 --set parallel.data=4 --set parallel.expert=4 --set train.batch_size=16
run expert8 8 --set parallel.data=8 --set parallel.expert=8 --set train.batch_size=32 --set model.experts=8
run expert2_data4 4 --set parallel.data=4 --set parallel.expert=2 --set train.batch_size=16
run expert2_pipeline2 4 --set parallel.data=2 --set parallel.expert=2 --set parallel.pipeline=2
run expert2_tensor2 4 --set parallel.data=2 --set parallel.expert=2 --set parallel.tensor.size=2
run expert2_sequence2 4 --set parallel.data=2 --set parallel.expert=2 --set parallel.sequence=2
# ... and on chunks: the experts in lists of their own, shared by the ranks holding them.
run expert2_data4_zero3_bf16 4 --set parallel.data=4 --set parallel.expert=2 --set zero.stage=3 \
  --set train.precision=bf16 --set train.batch_size=16
run expert4_zero1 4 --set parallel.data=4 --set parallel.expert=4 --set zero.stage=1 --set train.batch_size=16
run single_bf16_b16 1 --set train.precision=bf16 --set train.batch_size=16
run single_fp32_b16 1 --set train.batch_size=16
run single_fp32_b32_e8 1 --set train.batch_size=32 --set model.experts=8
qwen=(--set model.type=qwen2_moe --set model.expert_intermediate_size=32 --set model.shared_expert_intermediate_size=48
      --set train.precision=bf16)
run qwen2_moe_single_bf16 1 "${qwen[@]}"
run qwen2_moe_data2_pipeline2_tensor2_bf16 8 "${qwen[@]}" --set parallel.data=2 --set parallel.pipeline=2 \
  --set parallel.tensor.size=2
offload=(--set parallel.data=2 --set zero.stage=3 --set memory.offload=chunk --set memory.chunk_size=150000
         --set model.n_embd=128 --set model.intermediate_size=128 --set model.seq_len=16 --set train.batch_size=4
         --set train.micro_batch_size=2 --set train.steps=6 --set train.eval_every=3)
run data2_zero3_offload_uncapped 2 "${offload[@]}" --set memory.device_limit=64GiB
cap=$(/usr/bin/python3 "$support/runs.py" device-cap "$dir" data2_zero3_offload_uncapped 0.3)
run data2_zero3_offload_capped 2 "${offload[@]}" --set memory.device_limit="$cap"
# Expert parallelism under offload: the experts' lists join the device tier's one dynamic memory
# (memory/dynamic_memory.h), capped = uncapped bitwise, and = the same layout without offload; at
# ZeRO-2 with the experts' optimizer states beyond memory.host_limit on disk too.
run expert2_zero3 2 "${offload[@]}" --set parallel.expert=2 --set memory.offload=none
run expert2_zero3_offload_uncapped 2 "${offload[@]}" --set parallel.expert=2 --set memory.device_limit=64GiB
cap=$(/usr/bin/python3 "$support/runs.py" device-cap "$dir" expert2_zero3_offload_uncapped 0.3)
run expert2_zero3_offload_capped 2 "${offload[@]}" --set parallel.expert=2 --set memory.device_limit="$cap"
cap=$(/usr/bin/python3 "$support/runs.py" device-cap "$dir" expert2_zero3_offload_uncapped 0.5)
run expert2_zero2_disk_capped 2 "${offload[@]}" --set parallel.expert=2 --set zero.stage=2 \
  --set memory.device_limit="$cap" --set memory.host_limit=9000000 --set memory.disk_dir="$dir" \
  --set checkpoint.dir="$dir/disk.ck" --set checkpoint.every=3
# Its checkpoint (the experts' states read back from their file) loads without offload: the same
# master weights and moments, bitwise.
run expert2_zero3_loaded 2 "${offload[@]}" --set parallel.expert=2 --set memory.offload=none \
  --resume "$dir/disk.ck/step-00000003" --stop-after 3 --set checkpoint.dir="$dir/loaded.ck"
"$tidal" checkpoint consolidate "$dir/disk.ck/step-00000003" "$dir/disk.whole" > /dev/null
"$tidal" checkpoint consolidate "$dir/loaded.ck/step-00000003" "$dir/loaded.whole" > /dev/null
/usr/bin/python3 - "$dir" "$support" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
worst = {}
for name, reference, tolerance in [("data2", "single_fp32", 1e-4), ("pipeline2", "single_fp32", 1e-4),
                                   ("tensor2_1d", "single_fp32", 1e-4), ("sequence2", "single_fp32", 1e-4),
                                   ("expert2", "single_fp32", 1e-4), ("expert4", "single_fp32_b16", 1e-4),
                                   ("expert8", "single_fp32_b32_e8", 1e-4), ("expert2_data4", "single_fp32_b16", 1e-4),
                                   ("expert2_pipeline2", "single_fp32", 1e-4), ("expert2_tensor2", "single_fp32", 1e-4),
                                   ("expert2_sequence2", "single_fp32", 1e-4),
                                   ("expert4_zero1", "single_fp32_b16", 1e-4),
                                   ("expert2_data4_zero3_bf16", "single_bf16_b16", 2e-3),
                                   ("data2_zero3_recomputed_bf16", "single_bf16", 2e-3),
                                   ("qwen2_moe_data2_pipeline2_tensor2_bf16", "qwen2_moe_single_bf16", 2e-3)]:
    w, summary = compare(d, name, reference, tolerance, all_steps=True)
    worst[tolerance] = max(worst.get(tolerance, 0.0), w)
compare(d, "data2_zero3_offload_capped", "data2_zero3_offload_uncapped", 0.0, all_steps=True)
compare(d, "expert2_zero3_offload_capped", "expert2_zero3_offload_uncapped", 0.0, all_steps=True)
compare(d, "expert2_zero3_offload_uncapped", "expert2_zero3", 1e-4, all_steps=True)
compare(d, "expert2_zero2_disk_capped", "expert2_zero3_offload_uncapped", 1e-4, all_steps=True)
from runs import tensors
for f in ("model.safetensors", "optimizer.safetensors"):
    saved, loaded = tensors(f"{d}/disk.whole/{f}"), tensors(f"{d}/loaded.whole/{f}")
    assert saved.keys() == loaded.keys() and any(".experts." in k for k in saved), f"{f}: tensor names"
    differ = [k for k in saved if saved[k] != loaded[k]]
    assert not differ, f"{f}: {len(differ)} tensors differ after the load, e.g. {differ[:3]}"
for name in ("expert2_zero3_offload_capped", "expert2_zero2_disk_capped"):
    offloaded = [json.loads(l) for l in open(f"{d}/{name}.jsonl")][-1]["model_data"]["offload"]
    assert offloaded["evictions"] > 0, f"{name}: no chunk was evicted under the cap"
    assert name != "expert2_zero2_disk_capped" or offloaded["disk"]["chunks"] > 0, f"{name}: no chunk on disk"
# The routing the metrics report is the same in every fp32 layout: tokens per expert (max / mean)
# and the load-balancing loss of step 1.
def first(name):
    return [json.loads(l) for l in open(f"{d}/{name}.jsonl") if '"moe"' in l][0]["moe"]
ref = first("single_fp32")
for name in ("data2", "pipeline2", "tensor2_1d", "sequence2"):
    got = first(name)
    for key in ("tokens_per_expert_max_over_mean", "aux_loss", "z_loss"):
        assert abs(got[key] - ref[key]) <= 1e-4 * abs(ref[key]), f"{name}: moe {key} {got[key]} vs {ref[key]}"
# The all-to-all's bytes of every step on rank 0 (the counting communicator's record) against the
# formula: each row it sent other ranks' experts, and each it received for its own, goes out and
# back in forward and again in backward (width 64, 4 B in fp32, 2 in bf16), and each layer's
# micro-batch first sends each other rank the counts of its experts' rows (experts / G int32).
for name, group, data, batch, experts, value in [("expert2", 2, 2, 8, 4, 4), ("expert4", 4, 4, 16, 4, 4),
                                                  ("expert8", 8, 8, 32, 8, 4), ("expert2_data4", 2, 4, 16, 4, 4),
                                                  ("expert2_data4_zero3_bf16", 2, 4, 16, 4, 2)]:
    micro_batches = batch // data // 4
    steps = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if '"exchange"' in l]
    assert len(steps) == 10, f"{name}: {len(steps)} steps with the exchange's rows"
    for r in steps:
        x = r["moe"]["exchange"]
        expected = (2 * (x["rows_sent"] + x["rows_received"]) * 64 * value
                    + 4 * micro_batches * (group - 1) * (experts // group) * 4)
        sent = r["communication"]["expert"]["send"]["bytes_sent"]
        assert sent == expected, f"{name} step {r['step']}: the all-to-all sent {sent} bytes, the formula {expected}"
print("all-to-all bytes of every step = 2 (rows sent + received) x width x bytes + the counts, in expert 2, 4, 8, "
      "expert 2 x data 4 and its ZeRO-3 in bf16")
print(f"step 1 routing in every fp32 layout: tokens per expert max/mean {ref['tokens_per_expert_max_over_mean']:.4f}, "
      f"aux loss {ref['aux_loss']:.5f}, z-loss {ref['z_loss']:.5f}")
print("PASS: Mixtral in data, pipeline, 1D tensor, sequence, expert 2 / 4 / 8, expert x data, expert x pipeline, "
      "expert x tensor, expert x sequence, expert x ZeRO-1 and expert x data x ZeRO-3 (bf16), data x ZeRO-3 recomputed (bf16), Qwen2-MoE in data x "
      "pipeline x tensor (bf16) = one process (worst relative difference fp32 "
      f"{worst[1e-4]:.2e} <= 1e-4, bf16 {worst[2e-3]:.2e} <= 2e-3); chunks offloaded under a device cap = uncapped, "
      "bitwise, with expert parallelism too (its states on disk beyond memory.host_limit as well)")
PY
expect_error "parallel.tensor.mode = \"1d\"" 4 "${common[@]}" --set parallel.tensor.size=4 --set parallel.tensor.mode=2d
echo "PASS: a 2D tensor layout exits 2 naming parallel.tensor.mode"
expect_error "parallel.expert = 4 must divide parallel.data = 2" 2 "${common[@]}" --set parallel.data=2 --set parallel.expert=4
echo "PASS: an expert group larger than the data ranks exits 2 naming the keys"
