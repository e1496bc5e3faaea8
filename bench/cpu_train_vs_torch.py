#!/usr/bin/python3
"""CPU training speed: tidal vs PyTorch, one after the other in one run, same model, batch,
threads and BLAS kernels.

Reference config: GPT n_layer 6, n_embd 384, n_head 6, vocab 512, seq_len 256, batch 8, fp32,
AdamW, gradient clipping at 1.0. Prints tokens/s of each, the ratio, and the model FLOP/s
(6N + 6LCT per token) as a fraction of this machine's SGEMM peak measured in the same run.
Both sides are bench/gpt_training.py's (PyTorch: the oracle's GPT-2, tests/oracle).

usage: bench/cpu_train_vs_torch.py [--build build] [--steps 20] [--threads 2]
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_training import GptShape, run_tidal, tidal_sets, tidal_speed, torch_train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = GptShape(n_layer=6, n_embd=384, n_head=6, vocab_size=512, seq_len=256)
BATCH = 8
WARMUP = 3


def blas_kernels():
    """The OpenBLAS kernels tidal selects for this CPU; PyTorch gets the same."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return os.environ["OPENBLAS_CORETYPE"]
    flags = open("/proc/cpuinfo").read()
    if all(f" {f} " in flags for f in ("avx512f", "avx512bw", "avx512vl")):
        return "SkylakeX"
    if " avx2 " in flags and " fma " in flags:
        return "Haswell"
    return None


def run_tidal_cpu(build, steps, env):
    sets = tidal_sets(SHAPE, BATCH, steps, "fp32", "cpu") + ["data.markov_branching=8"]
    records = run_tidal(os.path.join(build, "src", "tidal"), sets, env=env)
    return tidal_speed(records, SHAPE, BATCH, WARMUP)[0]


def sgemm_peak(build, env):
    out = subprocess.run([os.path.join(build, "bench", "bench_cpu_ops"), "--peak-only"], check=True, env=env,
                         capture_output=True, text=True).stdout
    return float(re.search(r"peak: ([0-9.]+) GFLOP/s", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    kernels = blas_kernels()
    if kernels:
        env["OPENBLAS_CORETYPE"] = kernels
        os.environ["OPENBLAS_CORETYPE"] = kernels  # before torch loads OpenBLAS
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    print(f"config: {SHAPE.describe()}, batch {BATCH}, fp32, AdamW + clip 1.0; {args.threads} threads, "
          f"OpenBLAS kernels {kernels or 'library default'}, {args.steps} steps ({WARMUP} warm-up steps not timed)")
    peak = sgemm_peak(args.build, env)
    tidal_tps = run_tidal_cpu(args.build, args.steps, env)
    torch_run = torch_train(SHAPE, BATCH, args.steps, WARMUP, "fp32", "cpu", "eager", threads=args.threads)
    torch_tps, torch_version = torch_run["tokens_per_s"], torch_run["torch"]
    flops_per_token = SHAPE.flops_per_token()
    print(f"parameters: {SHAPE.parameters()}; model FLOPs per token (6N + 6LCT, N without the position embedding): "
          f"{flops_per_token / 1e6:.1f} M; PyTorch attention: {torch_run['attention']}")
    print(f"measured SGEMM peak: {peak:.1f} GFLOP/s")
    for name, tps in (("tidal", tidal_tps), (f"PyTorch {torch_version}", torch_tps)):
        gflops = tps * flops_per_token / 1e9
        print(f"{name:<16} {tps:9.0f} tokens/s  {gflops:7.1f} GFLOP/s  {100 * gflops / peak:5.1f}% of SGEMM peak")
    print(f"ratio tidal / PyTorch: {tidal_tps / torch_tps:.2f}x")


if __name__ == "__main__":
    main()
