#!/usr/bin/python3
"""Activation checkpointing: memory saved and time added, side by side in one run.

For the reference GPT (n_layer 6, n_embd 384, n_head 6, vocab 512, seq_len 256, batch 8, fp32)
and a 24-layer GPT of the same width, trains a few steps with train.activation_checkpointing =
none, blocks, every_k (k = 2) and blocks with host offload, and prints the activation pool's
peak bytes (from tidal's allocator) and the step time, each as a ratio to "none".

usage: bench/activation_checkpointing.py [--build build] [--steps 5]
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = dict(n_embd=384, n_head=6, vocab_size=512, seq_len=256)
BATCH = 8
MODELS = [("reference GPT, 6 layers", 6), ("GPT, 24 layers", 24)]
VARIANTS = [
    ("none", ["train.activation_checkpointing=none"]),
    ("blocks", ["train.activation_checkpointing=blocks"]),
    ("every_k (k=2)", ["train.activation_checkpointing=every_k", "train.activation_checkpointing_k=2"]),
    ("blocks + host offload", ["train.activation_checkpointing=blocks", "train.activation_offload=host"]),
]


def run(build, steps, n_layer, sets):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        args = [f"model.{k}={v}" for k, v in BASE.items()] + [f"model.n_layer={n_layer}"]
        args += [f"train.batch_size={BATCH}", f"train.steps={steps}", "train.eval_every=0", "train.eval_batches=1"]
        cmd = [os.path.join(build, "src", "tidal"), "train", "--metrics", metrics]
        for s in args + sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        rows = [json.loads(line) for line in open(metrics)]
    steps_rows = [r for r in rows if "step_time_s" in r]
    timed = steps_rows[min(3, len(steps_rows) - 1):]
    summary = [r for r in rows if r.get("summary")][-1]
    return summary["peak_bytes"]["activations"], sum(r["step_time_s"] for r in timed) / len(timed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    print(f"config: GPT width {BASE['n_embd']}, {BASE['n_head']} heads, vocab {BASE['vocab_size']}, seq_len "
          f"{BASE['seq_len']}, batch {BATCH}, fp32, {os.cpu_count()} cores; step time = mean after 3 untimed steps")
    print(f"{'model':<26} {'checkpointing':<22} {'activation peak':>16} {'saved':>7} {'step s':>8} {'time':>7}")
    for label, n_layer in MODELS:
        ref_peak = ref_time = None
        for name, sets in VARIANTS:
            peak, step = run(args.build, args.steps, n_layer, sets)
            ref_peak, ref_time = ref_peak or peak, ref_time or step
            print(f"{label:<26} {name:<22} {peak / 2**20:>12.1f} MiB {1 - peak / ref_peak:>6.0%} {step:>8.3f} "
                  f"{step / ref_time:>6.2f}x")


if __name__ == "__main__":
    main()
