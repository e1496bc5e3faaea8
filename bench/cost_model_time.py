#!/usr/bin/python3
"""The cost model's step time against measured steps, on this machine (issue: predict before you run).

In each of --rounds rounds, calibrates this machine for each world size (`mpirun -np N tidal
calibrate`: GEMM rates, memory bandwidth and the links as N ranks sharing its cores see them), then
for each run below trains the model (`tidal train`, --steps steps); after the last round it
calibrates once more. A round's prediction of a run is the geometric mean of `tidal plan --world N
--configured --hardware <file>`'s step time on the calibrations before and after that round's runs
(they bracket the machine's state while the runs ran). A run's measure is the median of its steps
after each first over the rounds, its prediction the median of the rounds'.
Prints one line per run: predicted, measured, their ratio and the prediction's largest terms; and
at the end the worst error and how many runs are within --tolerance (20%). Beside each ratio, the
range of the rounds' own (a round's prediction over that round's median step): how far the
machine's drift alone moves it.

The runs share this machine's cores: time figures are medians. A world larger than the cores
(mpirun --oversubscribe) counts too, marked: its ranks take turns on the cores, and a rank waiting
on another yields its core (comm/mpi_progress.h). Its calibration times the ops with as many ranks
as the cores hold and gives each rank's share with all computing; the cost model lets a rank run
faster while fewer compute (sim/hardware.h's oversubscription).

With --terms, a second line per run sets the prediction's terms beside rank 0's profile of the
same work (train.profile: GEMMs, attention, the other ops and what no op holds, communication,
the optimizer), medians over the steps.

usage: bench/cost_model_time.py [--build build] [--steps 8] [--only NAME] [--tolerance 0.2] [--terms]
           [--rounds 5] [--keep DIR]
"""
import argparse
import functools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["model.n_layer=4", "model.n_embd=256", "model.n_head=4", "model.seq_len=128", "model.vocab_size=512",
        "train.batch_size=8", "train.eval_every=0", "train.eval_batches=1", "train.log_every=1"]

RUNS = [  # name, ranks, settings
    ("data2", 2, ["parallel.data=2"]),
    ("data2_zero1", 2, ["parallel.data=2", "zero.stage=1"]),
    ("data2_zero2_bf16", 2, ["parallel.data=2", "zero.stage=2", "train.precision=bf16"]),
    ("data2_zero3", 2, ["parallel.data=2", "zero.stage=3"]),
    ("data2_zero2_micro", 2, ["parallel.data=2", "zero.stage=2", "train.micro_batch_size=2"]),
    ("tensor2_1d", 2, ["parallel.tensor.size=2"]),
    ("pipeline2_1f1b", 2, ["parallel.pipeline=2", "train.micro_batch_size=2"]),
    ("pipeline2_gpipe", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=gpipe"]),
    ("pipeline2_zb_h1", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=zb-h1"]),
    ("pipeline2_zb_h1_bf16_zero2", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=zb-h1",
                                       "train.precision=bf16", "zero.stage=2"]),
    ("pipeline2_zb_v", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=zb-v",
                           "parallel.virtual_stages=2"]),
    ("ring2", 2, ["parallel.sequence=2"]),
    ("ulysses2", 2, ["parallel.sequence=2", "parallel.sequence_mode=ulysses"]),
    ("data2_selective", 2, ["parallel.data=2", "train.activation_checkpointing=selective"]),
    ("data2_blocks", 2, ["parallel.data=2", "train.activation_checkpointing=blocks"]),
    ("data2_llama", 2, ["parallel.data=2", "model.type=llama", "model.n_kv_head=2"]),
    ("data2_bert", 2, ["parallel.data=2", "model.type=bert"]),
    ("tensor4_2d", 4, ["parallel.tensor.size=4", "parallel.tensor.mode=2d"]),
    ("tensor4_1d", 4, ["parallel.tensor.size=4"]),
    ("d2_p2", 4, ["parallel.data=2", "parallel.pipeline=2", "train.micro_batch_size=2"]),
    ("d2_t2_zero2", 4, ["parallel.data=2", "parallel.tensor.size=2", "zero.stage=2"]),
    ("data4", 4, ["parallel.data=4"]),
    ("ring4", 4, ["parallel.sequence=4"]),
    ("pipeline4_1f1b", 4, ["parallel.pipeline=4", "train.micro_batch_size=1"]),
    ("pipeline4_zb_h1", 4, ["parallel.pipeline=4", "train.micro_batch_size=1", "parallel.schedule=zb-h1"]),
    ("pipeline4_zb_v", 4, ["parallel.pipeline=4", "train.micro_batch_size=1", "parallel.schedule=zb-v",
                           "parallel.virtual_stages=2", "model.n_layer=8"]),
    ("pipeline4_interleaved", 4, ["parallel.pipeline=4", "parallel.schedule=interleaved",
                                  "parallel.virtual_stages=1", "train.micro_batch_size=2"]),
    ("offload_chunk_zero2", 2, ["memory.offload=chunk", "memory.device_limit=56MiB", "parallel.data=2",
                                "zero.stage=2"]),
    ("offload_static_bf16", 2, ["memory.offload=static", "memory.device_limit=40MiB", "parallel.data=2",
                                "zero.stage=2", "train.precision=bf16"]),
    ("tensor8_2p5d", 8, ["parallel.tensor.size=8", "parallel.tensor.mode=2.5d", "parallel.tensor.depth=2"]),
    ("tensor8_3d", 8, ["parallel.tensor.size=8", "parallel.tensor.mode=3d"]),
    ("data8_zero3", 8, ["parallel.data=8", "zero.stage=3"]),
]


# The prediction's terms (tidal plan --json's "time") and the profile's op families (train.profile)
# that time the same work, for --terms.
TERM_KEYS = {"gemm": ["gemm_s"], "attention": ["attention_s"], "memory": ["memory_s", "offload_s"],
             "comm": ["layer_comm_s", "pipeline_wait_s", "after_s"], "optimizer": ["optimizer_s"]}
TERM_FAMILIES = {"gemm": ["gemm"], "attention": ["attention"],
                 "memory": ["layernorm", "gelu", "cross_entropy", "copy_cast", "elementwise", "outside_ops"],
                 "comm": ["communication"], "optimizer": ["optimizer"]}
# The terms that add up to step_time_s (compute holds gemm and attention; hidden is not in it).
TOTAL_TERMS = ["compute_s", "memory_s", "layer_comm_s", "pipeline_wait_s", "after_s", "optimizer_s", "offload_s"]
PROFILE_TERMS = sorted({f for fs in TERM_FAMILIES.values() for f in fs})


def sets(settings):
    out = []
    for s in BASE + settings:
        out += ["--set", s]
    return out


def gemm_rates(path):
    """A hardware file's fp32 GEMM rates: its sizes' curve, then the peak (TFLOP/s)."""
    with open(path, "rb") as f:
        device = tomllib.load(f)["device"]
    return [rate for _, rate in device.get("gemm_sizes", {}).get("fp32", [])] + [device["tflops"]["fp32"]]


def mpirun(ranks):
    launcher = shutil.which("mpirun") or sys.exit("mpirun not found: run scripts/setup.sh")
    return [launcher, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--only", action="append")
    ap.add_argument("--tolerance", type=float, default=0.2)
    ap.add_argument("--terms", action="store_true", help="each run's predicted terms beside rank 0's profile")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of calibrating and running every layout")
    ap.add_argument("--keep", help="a folder to keep each round's hardware files and metrics in")
    a = ap.parse_args()
    tidal = os.path.join(a.build, "src", "tidal")
    runs = [r for r in RUNS if not a.only or r[0] in a.only]
    # The machine's rates drift by 10-20% from minute to minute on a shared VM. So in each round
    # every layout runs between two calibrations and is predicted on both (the geometric mean: on
    # the runs kept from 2026-11-28, bracketing cut the rounds' rms log error from 0.097 and 0.133
    # to 0.092 and 0.118 against the calibration before alone); a layout's measure is the median of
    # its steps over the rounds, its prediction the median of the rounds' predictions.
    timed = {name: [] for name, _, _ in runs}
    plans = {name: [] for name, _, _ in runs}
    round_ratios = {name: [] for name, _, _ in runs}  # each round's prediction over its own median step
    worlds = sorted({r[1] for r in runs})
    with tempfile.TemporaryDirectory() as scratch:
        tmp = a.keep or scratch
        os.makedirs(tmp, exist_ok=True)

        def calibrate(index):
            out = {}
            for ranks in worlds:
                out[ranks] = os.path.join(tmp, f"here-{ranks}-{index}.toml")
                subprocess.run(mpirun(ranks) + [tidal, "calibrate", "--out", out[ranks]], check=True,
                               stdout=subprocess.DEVNULL, cwd=ROOT)
                print(f"calibration {index + 1} of {a.rounds + 1}: {ranks} ranks, fp32 GEMM TFLOP/s by size: "
                      + " ".join(f"{r:.3f}" for r in gemm_rates(out[ranks])), flush=True)
            return out

        @functools.cache  # each calibration but the first and last predicts two rounds
        def plan(ranks, settings, hardware):
            return json.loads(subprocess.run(
                [tidal, "plan", "--world", str(ranks), "--configured", "--json", "--hardware", hardware]
                + sets(list(settings)), check=True, capture_output=True, text=True, cwd=ROOT).stdout.splitlines()[0])

        before = calibrate(0)
        for round_ in range(a.rounds):
            medians = {}
            for name, ranks, settings in runs:
                metrics = os.path.join(tmp, f"{name}-{round_}.jsonl")
                subprocess.run(mpirun(ranks) + [tidal, "train", "--metrics", metrics, "--set", f"train.steps={a.steps}",
                                                "--set", "train.profile=true"]
                               + sets(settings), check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
                steps = [json.loads(l) for l in open(metrics)]
                mine = [r for r in steps if "step_time_s" in r and not r.get("summary")][1:]  # after the first
                timed[name] += mine
                medians[name] = statistics.median(r["step_time_s"] for r in mine)
            after = calibrate(round_ + 1)
            for name, ranks, settings in runs:
                pair = [plan(ranks, tuple(settings), before[ranks]), plan(ranks, tuple(settings), after[ranks])]
                plans[name].append({"step_time_s": math.sqrt(pair[0]["step_time_s"] * pair[1]["step_time_s"]),
                                    "time": {k: (pair[0]["time"][k] + pair[1]["time"][k]) / 2
                                             for k in pair[0]["time"]}})  # the terms, for --terms
                round_ratios[name].append(plans[name][-1]["step_time_s"] / medians[name])
            before = after
    print(f"model: {' '.join(BASE)}; {a.steps} steps a run, {a.rounds} rounds; medians")
    print(f"{'run':<24} {'ranks':>5} {'predicted':>10} {'measured':>10} {'ratio':>6} {'rounds':>11}  largest terms")
    errors = []
    for name, ranks, settings in runs:
        measured = statistics.median(r["step_time_s"] for r in timed[name])
        # Rank 0's profile (median per family) beside the prediction's terms of the same work.
        families = {f: statistics.median(r["profile"]["ops_s"].get(f, 0) for r in timed[name] if "profile" in r)
                    for f in PROFILE_TERMS}
        predicted = statistics.median(p["step_time_s"] for p in plans[name])
        time = {k: statistics.median(p["time"][k] for p in plans[name]) for k in plans[name][0]["time"]}
        terms = sorted(((k, v) for k, v in time.items() if k in TOTAL_TERMS), key=lambda kv: -kv[1])[:3]
        oversubscribed = ranks > (os.cpu_count() or 1)
        errors.append((name, predicted / measured - 1))
        spread = f"{min(round_ratios[name]):.2f}-{max(round_ratios[name]):.2f}"
        print(f"{name:<24} {ranks:>5} {predicted:>9.4f}s {measured:>9.4f}s {predicted / measured:>6.2f} {spread:>11}  "
              + ", ".join(f"{k[:-2]} {v:.4f}s" for k, v in terms)
              + (f"  (oversubscribed: {ranks} ranks on {os.cpu_count()} cores)" if oversubscribed else ""))
        if a.terms:
            measured_terms = {term: sum(families[f] for f in fs) for term, fs in TERM_FAMILIES.items()}
            predicted_terms = {term: sum(time.get(k, 0) for k in ks) for term, ks in TERM_KEYS.items()}
            print(f"{'':<30} predicted / profiled: " + ", ".join(
                f"{t} {predicted_terms[t]:.4f}/{measured_terms[t]:.4f}" for t in TERM_KEYS))
    if not errors:
        return
    within = [n for n, e in errors if abs(e) <= a.tolerance]
    worst = max(errors, key=lambda ne: abs(ne[1]))
    print(f"within {100 * a.tolerance:.0f}%: {len(within)} of {len(errors)}; worst {worst[0]} "
          f"{100 * worst[1]:+.1f}%")


if __name__ == "__main__":
    main()
