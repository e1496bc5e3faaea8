#!/usr/bin/env python3
"""The cost model's memory against the allocators (issue: predict before you run).

For each run below: `tidal plan --world N --configured --json` predicts every rank's model data,
activation peak and device and host peaks, and rank 0's collectives of a step; `tidal train` (2
steps, under mpirun for N > 1) measures them - the chunk lists' peaks (model_data), the activation
pool's peak and the host allocator's (the tensor keeper's fp32 tensors live there), under offload
the device tier's peak and the host's lists, every rank's; and rank 0's last step's
`communication` record. Prints one line per run and rank; fails when a rank's predicted peak is
more than --tolerance (5%) from the measured one, the chunk lists' bytes (model_data_bytes, what
the lists hold between steps) differ at all, or any group's calls, elements, bytes sent or link
bytes differ from the counting communicator's. Under memory.offload (3 steps: the third is the
first after the warm-up's placements), every rank's chunk moves of the last step, host to device
and back, and its evictions, must equal the prediction's.

  tests/sim/check_cost_model.py build/src/tidal [--only NAME] [--tolerance 0.05] [--mpirun mpirun ARGS...]
"""
import argparse, json, os, subprocess, sys, tempfile

BASE = ["model.n_layer=4", "model.n_embd=128", "model.n_head=4", "model.seq_len=64", "train.batch_size=8",
        "train.steps=2", "train.eval_batches=1", "train.log_every=1"]

RUNS = [  # name, ranks, settings
    ("fp32", 1, []),
    ("bf16", 1, ["train.precision=bf16"]),
    ("zero1_fp32", 1, ["zero.stage=1"]),
    ("selective", 1, ["train.activation_checkpointing=selective"]),
    ("blocks", 1, ["train.activation_checkpointing=blocks"]),
    ("every_2", 1, ["train.activation_checkpointing=every_k", "train.activation_checkpointing_k=2"]),
    ("loss_chunks", 1, ["train.loss_chunks=4", "model.vocab_size=512"]),
    ("dropout", 1, ["model.dropout=0.1"]),
    ("micro_batches", 1, ["train.micro_batch_size=2"]),
    ("llama", 1, ["model.type=llama", "model.n_kv_head=2"]),
    ("qwen2", 1, ["model.type=qwen2", "model.n_kv_head=2"]),
    ("mixtral", 1, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4", "model.intermediate_size=96"]),
    ("qwen2_moe", 1, ["model.type=qwen2_moe", "model.n_kv_head=2", "model.experts=6", "model.experts_per_token=3",
                      "model.expert_intermediate_size=48", "model.shared_expert_intermediate_size=64"]),
    ("bert", 1, ["model.type=bert"]),
    ("vit", 1, ["model.type=vit", "data.kind=images", "model.image_size=32", "model.patch_size=4"]),
    ("data2_zero2", 2, ["parallel.data=2", "zero.stage=2"]),
    ("data2_zero3_bf16", 2, ["parallel.data=2", "zero.stage=3", "train.precision=bf16"]),
    ("data2_zero3_8_layers", 2, ["parallel.data=2", "zero.stage=3", "model.n_layer=8"]),
    ("data2_zero3_2_layers", 2, ["parallel.data=2", "zero.stage=3", "model.n_layer=2"]),
    ("pipeline2_1f1b", 2, ["parallel.pipeline=2", "train.micro_batch_size=2"]),
    # Zero bubble: each backward as B and W, the W's held back (pipeline/schedule.h) as many as
    # the replayed step finds within parallel.zb_memory of 1F1B's activations: at 2 the last stage
    # holds its one W, by default (1.05) none here.
    ("pipeline2_zb_h1", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=zb-h1",
                            "parallel.zb_memory=2"]),
    ("pipeline2_zb_h1_bf16_zero2", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=zb-h1",
                                       "train.precision=bf16", "zero.stage=2"]),
    ("pipeline2_zb_v", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=zb-v",
                           "parallel.virtual_stages=2"]),
    # ZB-V's rank 0 holds the first and the last layers: the chunks keep the tied table once.
    ("pipeline2_zb_v_bf16_zero2", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=zb-v",
                                      "parallel.virtual_stages=2", "train.precision=bf16", "zero.stage=2"]),
    ("pipeline2_gpipe", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=gpipe"]),
    ("tensor2_1d", 2, ["parallel.tensor.size=2"]),
    ("qwen2_tensor2_1d", 2, ["model.type=qwen2", "model.n_kv_head=2", "parallel.tensor.size=2"]),
    ("ring2", 2, ["parallel.sequence=2"]),
    ("mixtral_data2_zero3_bf16", 2, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4",
                                     "model.intermediate_size=96", "parallel.data=2", "zero.stage=3",
                                     "train.precision=bf16"]),
    ("mixtral_tensor2_1d", 2, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4",
                               "model.intermediate_size=96", "parallel.tensor.size=2"]),
    ("mixtral_expert2", 2, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4", "model.intermediate_size=96",
                            "parallel.data=2", "parallel.expert=2"]),
    # The experts in chunk lists of their own, over the data ranks holding the same experts.
    ("mixtral_expert2_zero1_bf16", 2, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4",
                                       "model.intermediate_size=96", "parallel.data=2", "parallel.expert=2",
                                       "zero.stage=1", "train.precision=bf16"]),
    # ... and offloaded: the experts' lists join the device tier's dynamic memory after the model's,
    # their optimizer states taking the device's margin after the model's: here the model's chunk
    # of states fits, the experts' (one chunk of 3.4 MiB) does not and moves its param chunk each
    # way. (Chunks of 300,000 elements: the routed rows' activations stray ~5% from the even
    # spread planned, 0.9 MiB, two of the searched size's expert chunks.)
    ("mixtral_expert2_offload_zero2", 2, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4",
                                          "model.intermediate_size=96", "parallel.data=2", "parallel.expert=2",
                                          "zero.stage=2", "memory.offload=chunk", "memory.device_limit=26.5MiB",
                                          "memory.chunk_size=300000", "train.batch_size=16", "train.steps=3"]),
    # (a batch of 16: the routed rows of 2 sequences a rank stray 7% from the even spread planned)
    ("mixtral_expert2_data4_zero3_bf16", 4, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4",
                                             "model.intermediate_size=96", "parallel.data=4", "parallel.expert=2",
                                             "train.batch_size=16", "zero.stage=3", "train.precision=bf16"]),
    ("mixtral_ring2", 2, ["model.type=mixtral", "model.n_kv_head=2", "model.experts=4", "model.intermediate_size=96",
                          "parallel.sequence=2"]),
    ("ulysses2", 2, ["parallel.sequence=2", "parallel.sequence_mode=ulysses"]),
    ("offload_chunk", 1, ["memory.offload=chunk", "memory.device_limit=24MiB", "train.steps=3"]),
    ("offload_static", 1, ["memory.offload=static", "memory.device_limit=24MiB", "train.precision=bf16",
                           "train.steps=3"]),
    ("offload_chunk_zero2", 2, ["memory.offload=chunk", "memory.device_limit=16MiB", "parallel.data=2",
                                "zero.stage=2", "train.steps=3"]),
    # Param chunks evicted for the activations' peak; with micro-batches, the gradient sums moving
    # with the optimizer states.
    ("offload_evicting", 1, ["memory.offload=chunk", "memory.device_limit=20MiB", "train.steps=3"]),
    ("offload_micro_batches", 1, ["memory.offload=chunk", "memory.device_limit=20MiB", "train.micro_batch_size=2",
                                  "train.steps=3"]),
    # ZeRO-3 fetches the other rank's chunks into the device beside its own: a state chunk on the
    # host and two evictions a step.
    ("offload_chunk_zero3", 2, ["memory.offload=chunk", "memory.device_limit=14MiB", "parallel.data=2",
                                "zero.stage=3", "train.steps=3"]),
    ("tensor4_2d", 4, ["parallel.tensor.size=4", "parallel.tensor.mode=2d"]),
    ("d2_p2_zero1", 4, ["parallel.data=2", "parallel.pipeline=2", "zero.stage=1", "train.micro_batch_size=2"]),
    # Stages 0 and 1 with micro-batches: each rank's sums in a grad list of every chunk, reduced
    # once a step.
    ("data2_bf16_micro_batches", 2, ["parallel.data=2", "train.precision=bf16", "train.micro_batch_size=2"]),
    ("data2_zero1_bf16_micro_batches", 2, ["parallel.data=2", "zero.stage=1", "train.precision=bf16",
                                           "train.micro_batch_size=2"]),
    # Stages 2 and 3 with micro-batches: each micro-batch's groups reduced as they complete, one in
    # flight beside the next group's pending sums.
    ("data2_zero2_micro_batches", 2, ["parallel.data=2", "zero.stage=2", "train.micro_batch_size=2"]),
    ("data2_zero3_bf16_micro_batches", 2, ["parallel.data=2", "zero.stage=3", "train.precision=bf16",
                                           "train.micro_batch_size=2"]),
    ("d2_p2_bf16", 4, ["parallel.data=2", "parallel.pipeline=2", "train.precision=bf16", "train.micro_batch_size=1"]),
    ("interleaved", 2, ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2",
                        "train.micro_batch_size=1"]),
    # LoRA (adapters on every linear of a Llama): the frozen base in the compute precision beside
    # the adapters' lists.
    ("lora", 1, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora",
                 "finetune.lora_targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"]),
    ("lora_bf16", 1, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora", "train.precision=bf16",
                      "finetune.lora_targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"]),
    # QLoRA: each product's dequantized weight a temporary of the step; the base streamed from the host.
    ("qlora", 1, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora", "train.precision=bf16",
                  "finetune.base_dtype=nf4", "finetune.lora_targets=q_proj,v_proj,down_proj"]),
    ("lora_base_host_bf16", 1, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora",
                                "train.precision=bf16", "finetune.base_offload=host",
                                "finetune.lora_targets=q_proj,v_proj,down_proj"]),
    ("qlora_base_host", 1, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora", "train.precision=bf16",
                            "finetune.base_dtype=nf4", "finetune.base_offload=host",
                            "finetune.lora_targets=q_proj,v_proj,down_proj"]),
    ("lora_data2_tensor2_zero2_bf16", 4, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora",
                                          "train.precision=bf16", "parallel.data=2", "parallel.tensor.size=2",
                                          "zero.stage=2", "finetune.lora_targets=q_proj,v_proj,down_proj"]),
    # Adapters split as a grid's and a cube's linears (nn/adapter_split.h): their blocks replicated
    # over the grid's rows and depth, h = x A^T summed over the row (gathered, reduce-scattered in 3D).
    ("lora_tensor4_2d_bf16", 4, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora",
                                 "train.precision=bf16", "parallel.tensor.size=4", "parallel.tensor.mode=2d",
                                 "finetune.lora_targets=q_proj,v_proj,down_proj"]),
    ("qlora_tensor8_3d", 8, ["model.type=llama", "model.n_kv_head=2", "finetune.method=lora", "train.precision=bf16",
                             "finetune.base_dtype=nf4", "parallel.tensor.size=8", "parallel.tensor.mode=3d",
                             "finetune.lora_targets=q_proj,v_proj,down_proj"]),
    ("tensor8_2p5d", 8, ["parallel.tensor.size=8", "parallel.tensor.mode=2.5d", "parallel.tensor.depth=2"]),
    ("tensor8_3d", 8, ["parallel.tensor.size=8", "parallel.tensor.mode=3d"]),
]


# Runs whose peak the model does not yet predict within the tolerance, and why. They run and print
# like the rest (their error is in the table); they do not fail the check. Each is work left on
# the cost model's issue - never a place to park a regression.
KNOWN_GAPS = {
}
# Runs whose collectives the replay does not yet count (their volumes are printed, not checked).
TRAFFIC_GAPS = {
}


def traffic_differences(predicted, measured, tolerance, routed):
    """Where rank 0's predicted collectives differ from its last step's `communication` record.
    In a mixture of experts (`routed`) an expert's rows are the tokens the router sends it, padded
    (nn/router.h), which the plan cannot know: it spreads them evenly. So the volumes that follow
    the rows - expert parallelism's sends and receives, a 1D tensor group's all-reduces of the
    experts' outputs - are held to the memory's tolerance there; every count of calls, and every
    other volume, exactly."""
    out = []
    for group in sorted(set(predicted) | set(measured)):
        for op in sorted(set(predicted.get(group, {})) | set(measured.get(group, {}))):
            p, m = predicted.get(group, {}).get(op), measured.get(group, {}).get(op)
            if p is None or m is None:
                out.append(f"{group}.{op}: predicted {p}, measured {m}")
                continue
            for key in ("calls", "elements", "bytes_sent", "link_bytes"):
                rows = routed and key != "calls" and (group, op) in (("expert", "send"), ("expert", "recv"),
                                                                     ("tensor", "all_reduce"))
                if abs(p[key] - m[key]) > (tolerance if rows else 1e-6) * max(1.0, abs(m[key])):
                    out.append(f"{group}.{op}.{key}: predicted {p[key]}, measured {m[key]}")
    return out


def sets(settings):
    out = []
    for s in BASE + settings:
        out += ["--set", s]
    return out


MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def launch(tidal, ranks, args):
    cmd = [tidal] + args
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def measured(summary, ranks):
    """Every rank's measured peaks: the device tier's (all memory without offload) and the host's."""
    peaks, md = summary["peak_bytes"], summary.get("model_data", {})
    out = []
    for r in range(ranks):
        pick = lambda d, key: d[key + "_per_rank"][r] if ranks > 1 else d[key]
        m = {"activations": pick(peaks, "activations"), "host": 0}
        if "offload" in md:  # the device tier holds chunks and the activations' pool; the host the lists
            m["model_data"] = pick(md, "optimizer_bytes_peak")
            m["device"] = md["device_peak_bytes_per_rank"][r] if ranks > 1 else md["offload"]["device_peak_bytes"]
            m["host"] = m["model_data"]
        else:
            # the chunk lists' own allocators (ZeRO-3's gathered chunks included), or the tensor
            # keeper's fp32 tensors in the host allocator
            m["model_data"] = pick(md, "param_bytes_peak") + pick(md, "optimizer_bytes_peak") if md \
                else pick(peaks, "host")
            # A frozen base (finetune.method = "lora") beside either keeper's model data, on the
            # device tier (made there one parameter at a time), or on the host under
            # finetune.base_offload = "host" (each module's weights in the activations' pool as it runs).
            if summary.get("frozen_on") == "host":
                m["host"] = summary["frozen_bytes"]
            else:
                m["model_data"] += summary.get("frozen_bytes", 0)
            m["device"] = m["model_data"] + m["activations"]
        out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tidal")
    ap.add_argument("--only", action="append")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--mpirun", nargs=argparse.REMAINDER, help="the launcher and its options (last)")
    a = ap.parse_args()
    global MPIRUN
    if a.mpirun:
        MPIRUN = a.mpirun
    failed = []
    mib = lambda b: f"{b / 2**20:.2f}"
    print(f"{'run':<20} {'rank':>4} {'model data pred / meas':>23} {'activations pred / meas':>24} "
          f"{'device pred / meas':>20} {'err':>7} {'host pred / meas':>18}")
    for name, ranks, settings in RUNS:
        if a.only and name not in a.only:
            continue
        with tempfile.TemporaryDirectory() as d:
            metrics = os.path.join(d, "m.jsonl")
            launch(a.tidal, ranks, ["train", "--metrics", metrics] + sets(settings))
            records = [json.loads(l) for l in open(metrics)]
            summary = [r for r in records if r.get("summary")][-1]
            steps = [r for r in records if "communication" in r and not r.get("summary")]
            last_step = steps[-1] if steps else None
            plan = json.loads(launch(a.tidal, 1, ["plan", "--world", str(ranks), "--configured", "--json"]
                                     + sets(settings)).stdout.splitlines()[0])
        meas = measured(summary, ranks)
        if any(x.startswith("parallel.pipeline=") for x in settings):
            # Where stage 0's step went, as the engine measured it (a contract of the step record).
            p = last_step.get("pipeline", {})
            if not (p.get("compute_s", 0) > 0 and p.get("wait_s", -1) >= 0):
                failed.append(f"{name}: no pipeline compute_s / wait_s in the step record")
        if last_step:
            differences = traffic_differences(plan["ranks"][0]["communication"], last_step["communication"],
                                              a.tolerance, any(t in " ".join(settings) for t in ("mixtral", "qwen2_moe")))
            for d in differences:
                print(f"{name:<20} traffic: {d}")
            if differences and name in TRAFFIC_GAPS:
                print(f"{'':<20} known gap: {TRAFFIC_GAPS[name]}")
            elif differences:
                failed.append(f"{name} traffic")
        moves = [r for r in records if "bytes_host_to_device" in r and not r.get("summary")]
        for r in range(ranks):
            pr, m = plan["ranks"][r], meas[r]
            md = pr["model_data"]
            if "offload" in pr:
                for key in ("bytes_host_to_device", "bytes_device_to_host", "evictions"):
                    got = moves[-1][key + "_per_rank"][r] if ranks > 1 else moves[-1][key]
                    if pr["offload"][key] != got:
                        failed.append(f"{name} rank {r}: {key} {pr['offload'][key]:.0f} predicted, {got} moved")
            if md["keeper"] == "chunks":
                lists = summary["model_data"]["model_data_bytes_per_rank"][r] if ranks > 1 \
                    else summary["model_data"]["model_data_bytes"]
                if lists != md["model_data_bytes"]:
                    failed.append(f"{name} rank {r}: chunk lists {md['model_data_bytes']} bytes predicted, {lists} "
                                  f"laid out")
            pmd = md["offload_host_bytes"] if "offload_host_bytes" in md else md["peak_bytes"]
            pdev, phost = pr["peak_bytes"]["device"], pr["peak_bytes"]["host"]
            err = (pdev - m["device"]) / m["device"]
            host_err = (phost - m["host"]) / m["host"] if m["host"] else 0.0
            print(f"{name:<20} {r:>4} {mib(pmd):>11} / {mib(m['model_data']):<9} {mib(pr['activations']):>11} / "
                  f"{mib(m['activations']):<10} {mib(pdev):>9} / {mib(m['device']):<8} {100 * err:>+6.1f}% "
                  f"{mib(phost):>8} / {mib(m['host']):<8}")
            for what, e in (("device", err), ("host", host_err)):
                if abs(e) > a.tolerance:
                    if name in KNOWN_GAPS:
                        print(f"{'':<20} known gap: {KNOWN_GAPS[name]}")
                    else:
                        failed.append(f"{name} rank {r} ({what} {100 * e:+.1f}%)")
    if failed:
        print("beyond the tolerance:", ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
