#!/usr/bin/python3
"""The tensor-parallel modes' step time against 1D's for one model and rank count (issue 64 Part B
item 5): 2D at 4 ranks against 1D at 4; 2.5D (depth 2) and 3D at 8 ranks against 1D at 8. On a GPU
every rank shares the one GPU (CUDA_VISIBLE_DEVICES=0), its collectives staged over MPI, so what
differs between the modes is their own work: the norms' and the loss's per-row combinations
(on the device since 2026-12-02; host loops before, 5-8x 1D's time a case on an H100) and the
modes' collectives. Each run trains the same GPT for --steps steps; its step time is the median
of rank 0's steps after the first 3. Prints each mode's step time, its ratio to 1D at the same
ranks (the issue's goal: at most 1.5x) and final loss, and one JSON line per run.

    python3 bench/tensor_modes_speed.py --tidal build/src/tidal [--device cuda|cpu] [--steps 12]
        [--mpirun "mpirun --allow-run-as-root --oversubscribe --bind-to none"] [--quick]

--device cpu --quick checks the plumbing on a machine without a GPU (the ratios then measure
ranks sharing 2 cores, not the modes).
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

WARMUP = 3
MODES = [  # name, ranks, keys
    ("1d", 4, ["parallel.tensor.size=4", "parallel.tensor.mode=1d"]),
    ("2d", 4, ["parallel.tensor.size=4", "parallel.tensor.mode=2d"]),
    ("1d", 8, ["parallel.tensor.size=8", "parallel.tensor.mode=1d"]),
    ("2.5d", 8, ["parallel.tensor.size=8", "parallel.tensor.mode=2.5d", "parallel.tensor.depth=2"]),
    ("3d", 8, ["parallel.tensor.size=8", "parallel.tensor.mode=3d"]),
]


def run(args, name, ranks, keys, model):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cmd = shlex.split(args.mpirun) + ["-np", str(ranks), args.tidal, "train", "--metrics", metrics]
        for k in model + keys:
            cmd += ["--set", k]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"), OMP_NUM_THREADS="1")
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if out.returncode != 0:
            print(out.stdout[-4000:])
            raise SystemExit(f"tensor_modes_speed: {name} on {ranks} ranks failed (exit {out.returncode})")
        records = [json.loads(line) for line in open(metrics)]
    steps = [r["step_time_s"] for r in records if "step_time_s" in r][WARMUP:]
    losses = [r["loss"] for r in records if "step_time_s" in r]
    if not steps:
        raise SystemExit(f"tensor_modes_speed: {name} ran no step after the {WARMUP} warm-up steps: give more --steps")
    return {"mode": name, "ranks": ranks, "step_s": statistics.median(steps), "final_loss": losses[-1],
            "losses": losses}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tidal", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe --bind-to none")
    ap.add_argument("--quick", action="store_true", help="a small model (the plumbing)")
    args = ap.parse_args()
    width, layers, batch, seq = (64, 2, 8, 32) if args.quick else (1024, 8, 16, 512)
    precision = "bf16" if args.device == "cuda" else "fp32"
    model = [f"model.n_embd={width}", f"model.n_layer={layers}", "model.n_head=16" if width >= 1024 else "model.n_head=8",
             f"model.seq_len={seq}", f"train.batch_size={batch}", f"train.steps={max(args.steps, WARMUP + 1)}",
             f"train.device={args.device}", f"train.precision={precision}", "train.eval_every=0",
             "train.eval_batches=1", "train.warmup_steps=1"]
    print(f"config: GPT {layers} layers x {width}, batch {batch} x {seq}, {precision} on {args.device}; "
          f"ranks share the device; median step of rank 0 after {WARMUP}")
    results = [run(args, name, ranks, keys, model) for name, ranks, keys in MODES]
    base = {r["ranks"]: r for r in results if r["mode"] == "1d"}
    for r in results:
        r["over_1d"] = r["step_s"] / base[r["ranks"]]["step_s"]
        r["loss_rel_diff_vs_1d"] = abs(r["final_loss"] - base[r["ranks"]]["final_loss"]) / abs(base[r["ranks"]]["final_loss"])
        print(f"  {r['mode']:>5} on {r['ranks']} ranks: step {r['step_s'] * 1e3:8.1f} ms, {r['over_1d']:.2f}x 1D "
              f"(goal <= 1.5x), final loss {r['final_loss']:.4f} ({r['loss_rel_diff_vs_1d']:.1e} from 1D)")
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "losses"} | {"device": args.device, "width": width,
                                                                          "layers": layers}))


if __name__ == "__main__":
    sys.exit(main())
