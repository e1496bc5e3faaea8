#!/usr/bin/python3
"""Token data at scale, read in place (docs/data.md): a generated corpus of --gib GiB of uint16
tokens in --shards llm.c shards against one of 10 MB, the same small GPT training on each.

For each corpus, `tidal train` runs --steps steps (data.path the directory of shards) and this
prints: the start-up - the wall time of a one-step run, from exec to exit (the shards' headers
are all it reads before training) - the peak of the metrics' resident_bytes over the steps, and
the loader's share of the step: the metrics' data_s (the time the trainer spends building the
step's batches out of the mapped shards) over step_time_s, median over the steps after the first.

usage: bench/data_at_scale.py [--build build] [--gib 4] [--shards 32] [--steps 50] [--dir DIR] [--keep]
"""
import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["model.n_layer=2", "model.n_embd=128", "model.n_head=4", "model.seq_len=256", "model.vocab_size=65536",
         "train.batch_size=8", "train.eval_every=0", "train.eval_batches=1", "data.kind=tokens"]


def write_shards(directory, tokens, shards, seed):
    """`shards` llm.c shards of uint16 tokens (random ids: any uint16, the model's vocabulary is
    65536), `tokens` in all."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed)
    per = tokens // shards
    for k in range(shards):
        header = struct.pack("<3i", 20240520, 1, per) + bytes(4 * 253)
        with open(os.path.join(directory, f"train_{k:06d}.bin"), "wb") as f:
            f.write(header)
            for at in range(0, per, 1 << 24):  # 16M tokens a write
                f.write(rng.randbytes(2 * min(1 << 24, per - at)))
    return per * shards


def run(tidal, corpus, steps, metrics):
    start = time.monotonic()
    r = subprocess.run([tidal, "train"] + [a for s in MODEL + [f"data.path={corpus}", f"train.steps={steps}"]
                                           for a in ("--set", s)] + ["--metrics", metrics],
                       capture_output=True, text=True)
    wall = time.monotonic() - start
    if r.returncode != 0:
        raise SystemExit(f"tidal train failed on {corpus}:\n{r.stderr[-2000:]}")
    rows = [json.loads(line) for line in open(metrics)]
    return wall, [r for r in rows if "step_time_s" in r and not r.get("summary")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--gib", type=float, default=4)
    p.add_argument("--shards", type=int, default=32)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--dir", default="", help="where the corpora go (a temporary directory there)")
    p.add_argument("--keep", action="store_true", help="keep the generated corpora")
    args = p.parse_args()
    tidal = os.path.join(args.build, "src", "tidal")
    base = tempfile.mkdtemp(dir=args.dir or None)
    try:
        big, small = os.path.join(base, "big"), os.path.join(base, "small")
        t0 = time.monotonic()
        n = write_shards(big, int(args.gib * 2**30) // 2, args.shards, 1)
        print(f"generated {n} tokens ({n * 2 / 2**30:.2f} GiB) in {args.shards} shards in "
              f"{time.monotonic() - t0:.1f} s under {big}")
        write_shards(small, 5_000_000, 1, 2)
        print(f"{'corpus':<8} {'start-up s':>11} {'resident peak MiB':>18} {'loader share':>13} {'data_s ms':>10}")
        figures = {}
        for name, corpus in (("10 MB", small), (f"{args.gib:g} GiB", big)):
            wall, _ = run(tidal, corpus, 1, os.path.join(base, "one.jsonl"))
            _, steps = run(tidal, corpus, args.steps, os.path.join(base, "steps.jsonl"))
            resident = max(r["resident_bytes"] for r in steps)
            share = statistics.median(r["data_s"] / r["step_time_s"] for r in steps[1:])
            data_ms = statistics.median(r["data_s"] for r in steps[1:]) * 1e3
            figures[name] = (wall, resident, share)
            print(f"{name:<8} {wall:>11.2f} {resident / 2**20:>18.1f} {100 * share:>12.3f}% {data_ms:>10.3f}")
        (w_small, r_small, _), (w_big, r_big, s_big) = figures.values()
        print(f"the large corpus: start-up {w_big:.2f} s (the small one's {w_small:.2f} s), resident peak "
              f"{(r_big - r_small) / 2**20:+.1f} MiB against the small one's, the loader {100 * s_big:.3f}% of a step")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
