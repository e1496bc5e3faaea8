#!/usr/bin/python3
"""Data parallelism: how much of the gradient all-reduce hides behind backward.

Runs the reference GPT (n_layer 6, n_embd 384, n_head 6, vocab 512, seq_len 256, global batch 8,
fp32) at parallel.data = 2 under mpirun, once per gradient bucket size, in one run. Prints each
variant's buckets, all-reduce time per step (in flight, union over buckets), the fraction of it
hidden behind backward, and tokens/s, beside the one-bucket variant (the all-reduce starts only
after backward: nothing to hide behind) as the reference.

usage: bench/data_parallel_overlap.py [--build build] [--steps 10] [--ranks 2]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = dict(n_layer=6, n_embd=384, n_head=6, vocab_size=512, seq_len=256)
BATCH = 8
BUCKETS_MB = [1000, 25, 4]  # 1000 MiB = one bucket (the reference: no overlap)


def run(build, steps, ranks, bucket_mb):
    mpirun = shutil.which("mpirun") or sys.exit("mpirun not found: run scripts/setup.sh")
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        sets = [f"model.{k}={v}" for k, v in MODEL.items()]
        sets += [f"train.batch_size={BATCH}", f"train.steps={steps}", "train.eval_every=0", "train.eval_batches=1",
                 f"parallel.data={ranks}", f"parallel.bucket_mb={bucket_mb}"]
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks),
               os.path.join(build, "src", "tidal"), "train", "--metrics", metrics]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        rows = [json.loads(line) for line in open(metrics)]
    summary = [r for r in rows if r.get("summary")][-1]
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    print(f"config: GPT {MODEL}, global batch {BATCH}, fp32, parallel.data = {args.ranks}, {args.steps} steps "
          f"(first 3 untimed), {os.cpu_count()} cores, OMP threads per rank: cores / ranks")
    print(f"{'bucket_mb':>10} {'all-reduce ms/step':>19} {'hidden':>7} {'tokens/s':>9} {'vs one bucket':>14}")
    reference = None
    for mb in BUCKETS_MB:
        s = run(args.build, args.steps, args.ranks, mb)
        hidden = s.get("allreduce_hidden_fraction", 0.0)
        ms = 1e3 * s.get("allreduce_s_per_step", 0.0)
        tps = s["tokens_per_s"]
        reference = reference or tps
        label = "one bucket" if mb == BUCKETS_MB[0] else str(mb)
        print(f"{label:>10} {ms:>19.1f} {100 * hidden:>6.0f}% {tps:>9.0f} {tps / reference:>13.2f}x")


if __name__ == "__main__":
    main()
