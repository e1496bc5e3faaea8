#!/usr/bin/python3
"""Activation checkpointing: memory saved and time added, side by side in one run.

For the reference GPT (n_layer 6, n_embd 384, n_head 6, vocab 512, seq_len 256, batch 8, fp32)
and a 24-layer GPT of the same width, trains a few steps with train.activation_checkpointing =
none, blocks, every_k (k = 2), blocks with host offload and selective (q, k, v and each MLP's
activation remade in backward), and prints the activation pool's
peak bytes (from tidal's allocator) and the step time, each as a ratio to "none".
--device cuda trains on the GPU instead, at GPT-2 124M's shape (width 768, 12 heads, seq_len
1024, vocab 50304, batch 8, bf16) with 12 and 24 layers.

usage: bench/activation_checkpointing.py [--tidal build/src/tidal] [--steps 5] [--device cpu|cuda] [--quick]
  --quick: the first model only
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Per device: the model keys but n_layer, the batch, the precision, the models (label, n_layer).
SETUPS = {
    "cpu": (dict(n_embd=384, n_head=6, vocab_size=512, seq_len=256), 8, "fp32",
            [("reference GPT, 6 layers", 6), ("GPT, 24 layers", 24)]),
    "cuda": (dict(n_embd=768, n_head=12, vocab_size=50304, seq_len=1024), 8, "bf16",
             [("GPT-2 124M, 12 layers", 12), ("GPT, 24 layers", 24)]),
}
VARIANTS = [
    ("none", ["train.activation_checkpointing=none"]),
    ("blocks", ["train.activation_checkpointing=blocks"]),
    ("every_k (k=2)", ["train.activation_checkpointing=every_k", "train.activation_checkpointing_k=2"]),
    ("blocks + host offload", ["train.activation_checkpointing=blocks", "train.activation_offload=host"]),
    ("selective", ["train.activation_checkpointing=selective"]),
]


def run(tidal, device, steps, n_layer, sets):
    base, batch, precision, _ = SETUPS[device]
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        args = [f"model.{k}={v}" for k, v in base.items()] + [f"model.n_layer={n_layer}"]
        args += [f"train.batch_size={batch}", f"train.steps={steps}", "train.eval_every=0", "train.eval_batches=1",
                 f"train.device={device}", f"train.precision={precision}"]
        cmd = [tidal, "train", "--metrics", metrics]
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
    ap.add_argument("--tidal", default=os.path.join(ROOT, "build", "src", "tidal"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", choices=SETUPS, default="cpu")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    base, batch, precision, models = SETUPS[args.device]
    print(f"config: GPT width {base['n_embd']}, {base['n_head']} heads, vocab {base['vocab_size']}, seq_len "
          f"{base['seq_len']}, batch {batch}, {precision}, train.device {args.device} ({os.cpu_count()} cores); "
          f"step time = mean after 3 untimed steps")
    print(f"{'model':<26} {'checkpointing':<22} {'activation peak':>16} {'saved':>7} {'step s':>8} {'time':>7}")
    for label, n_layer in models[:1] if args.quick else models:
        ref_peak = ref_time = None
        for name, sets in VARIANTS:
            peak, step = run(args.tidal, args.device, args.steps, n_layer, sets)
            ref_peak, ref_time = ref_peak or peak, ref_time or step
            print(f"{label:<26} {name:<22} {peak / 2**20:>12.1f} MiB {1 - peak / ref_peak:>6.0%} {step:>8.3f} "
                  f"{step / ref_time:>6.2f}x")


if __name__ == "__main__":
    main()
