#!/usr/bin/python3
"""The cost model's step time against measured steps, on this machine (issue: predict before you run).

Calibrates this machine for each world size (`mpirun -np N tidal calibrate`: GEMM rates, memory
bandwidth and the links as N ranks sharing its cores see them), then for each run below trains
the model (`tidal train`, --steps steps) and takes the median of its steps' times after the first,
and asks `tidal plan --world N --configured --hardware <file>` for the predicted step time. Prints
one line per run: predicted, measured, their ratio and the prediction's largest terms; and at
the end the worst error and how many runs are within --tolerance (20%).

The runs share this machine's cores: time figures are medians. A world larger than the cores
(mpirun --oversubscribe) is calibrated under the same sharing, but its ranks take turns on the
cores and wait on each other's turns, which no rate captures: those runs print, marked, and do not
count toward the within-tolerance figure.

usage: bench/cost_model_time.py [--build build] [--steps 8] [--only NAME] [--tolerance 0.2]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["model.n_layer=4", "model.n_embd=256", "model.n_head=4", "model.seq_len=128", "model.vocab_size=512",
        "train.batch_size=8", "train.eval_every=0", "train.eval_batches=1", "train.log_every=1"]

RUNS = [  # name, ranks, settings
    ("data2", 2, ["parallel.data=2"]),
    ("data2_zero1", 2, ["parallel.data=2", "zero.stage=1"]),
    ("data2_zero2_bf16", 2, ["parallel.data=2", "zero.stage=2", "train.precision=bf16"]),
    ("data2_zero3", 2, ["parallel.data=2", "zero.stage=3"]),
    ("tensor2_1d", 2, ["parallel.tensor.size=2"]),
    ("pipeline2_1f1b", 2, ["parallel.pipeline=2", "train.micro_batch_size=2"]),
    ("pipeline2_gpipe", 2, ["parallel.pipeline=2", "train.micro_batch_size=2", "parallel.schedule=gpipe"]),
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
    ("pipeline4_interleaved", 4, ["parallel.pipeline=4", "parallel.schedule=interleaved",
                                  "parallel.virtual_stages=1", "train.micro_batch_size=2"]),
]


def sets(settings):
    out = []
    for s in BASE + settings:
        out += ["--set", s]
    return out


def mpirun(ranks):
    launcher = shutil.which("mpirun") or sys.exit("mpirun not found: run scripts/setup.sh")
    return [launcher, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--only", action="append")
    ap.add_argument("--tolerance", type=float, default=0.2)
    a = ap.parse_args()
    tidal = os.path.join(a.build, "src", "tidal")
    runs = [r for r in RUNS if not a.only or r[0] in a.only]
    with tempfile.TemporaryDirectory() as tmp:
        hardware = {}
        for ranks in sorted({r[1] for r in runs}):
            hardware[ranks] = os.path.join(tmp, f"here-{ranks}.toml")
            subprocess.run(mpirun(ranks) + [tidal, "calibrate", "--out", hardware[ranks]], check=True,
                           stdout=subprocess.DEVNULL, cwd=ROOT)
            print(f"calibrated {ranks} ranks: " + " ".join(
                line.strip() for line in open(hardware[ranks]) if line.startswith(("tflops", "memory_gbps"))))
        print(f"model: {' '.join(BASE)}; {a.steps} steps, median after the first")
        print(f"{'run':<24} {'ranks':>5} {'predicted':>10} {'measured':>10} {'ratio':>6}  largest terms")
        errors = []
        for name, ranks, settings in runs:
            metrics = os.path.join(tmp, f"{name}.jsonl")
            subprocess.run(mpirun(ranks) + [tidal, "train", "--metrics", metrics, "--set", f"train.steps={a.steps}"]
                           + sets(settings), check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            steps = [json.loads(l) for l in open(metrics)]
            times = [r["step_time_s"] for r in steps if "step_time_s" in r and not r.get("summary")][1:]
            measured = statistics.median(times)
            plan = json.loads(subprocess.run(
                [tidal, "plan", "--world", str(ranks), "--configured", "--json", "--hardware", hardware[ranks]]
                + sets(settings), check=True, capture_output=True, text=True, cwd=ROOT).stdout.splitlines()[0])
            predicted = plan["step_time_s"]
            terms = sorted(plan["time"].items(), key=lambda kv: -kv[1])[:3]
            oversubscribed = ranks > (os.cpu_count() or 1)
            if not oversubscribed:
                errors.append((name, predicted / measured - 1))
            print(f"{name:<24} {ranks:>5} {predicted:>9.4f}s {measured:>9.4f}s {predicted / measured:>6.2f}  "
                  + ", ".join(f"{k[:-2]} {v:.4f}s" for k, v in terms)
                  + (f"  (oversubscribed: {ranks} ranks on {os.cpu_count()} cores)" if oversubscribed else ""))
        if not errors:
            return
        within = [n for n, e in errors if abs(e) <= a.tolerance]
        worst = max(errors, key=lambda ne: abs(ne[1]))
        print(f"within {100 * a.tolerance:.0f}%: {len(within)} of {len(errors)}; worst {worst[0]} "
              f"{100 * worst[1]:+.1f}%")


if __name__ == "__main__":
    main()
