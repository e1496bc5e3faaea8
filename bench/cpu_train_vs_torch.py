#!/usr/bin/python3
"""CPU training speed: tidal vs PyTorch, one after the other in one run, same model, batch,
threads and BLAS kernels.

Reference config: GPT n_layer 6, n_embd 384, n_head 6, vocab 512, seq_len 256, batch 8, fp32,
AdamW, gradient clipping at 1.0. Prints tokens/s of each, the ratio, and the model FLOP/s
(6N + 6LCT per token) as a fraction of this machine's SGEMM peak measured in the same run.
PyTorch runs the same GPT-2 module the oracle tests check tidal against (tests/oracle).

usage: bench/cpu_train_vs_torch.py [--build build] [--steps 20] [--threads 2]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = dict(n_layer=6, n_embd=384, n_head=6, vocab_size=512, seq_len=256, batch_size=8)
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


def run_tidal(build, steps, env):
    sets = [f"model.{k}={v}" for k, v in CONFIG.items() if k != "batch_size"]
    sets += [f"train.batch_size={CONFIG['batch_size']}", f"train.steps={steps}", "train.eval_every=0",
             "train.eval_batches=1", "train.warmup_steps=1", "data.markov_branching=8"]
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [os.path.join(build, "src", "tidal"), "train", "--metrics", metrics]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        lines = [json.loads(l) for l in open(metrics)]
    summary = lines[-1]
    return summary["tokens_per_s"], summary["parameters"]


def run_torch(steps, threads):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
    from reference import GPT
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    c = CONFIG
    model = GPT(c["vocab_size"], c["seq_len"], c["n_embd"], c["n_layer"], c["n_head"], 1e-5)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.0)
    B, T = c["batch_size"], c["seq_len"]
    batch = {"tokens": torch.randint(0, c["vocab_size"], (B, T)), "targets": torch.randint(0, c["vocab_size"], (B, T))}
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss = model(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    timed = times[WARMUP:]
    return B * T * len(timed) / sum(timed), torch.__version__


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

    c = CONFIG
    print(f"config: GPT n_layer {c['n_layer']}, n_embd {c['n_embd']}, n_head {c['n_head']}, vocab {c['vocab_size']}, "
          f"seq_len {c['seq_len']}, batch {c['batch_size']}, fp32, AdamW + clip 1.0; {args.threads} threads, "
          f"OpenBLAS kernels {kernels or 'library default'}, {args.steps} steps ({WARMUP} warm-up steps not timed)")
    peak = sgemm_peak(args.build, env)
    tidal_tps, params = run_tidal(args.build, args.steps, env)
    torch_tps, torch_version = run_torch(args.steps, args.threads)
    L, C, T = c["n_layer"], c["n_embd"], c["seq_len"]
    flops_per_token = 6 * params + 6 * L * C * T
    print(f"parameters: {params}; model FLOPs per token (6N + 6LCT): {flops_per_token / 1e6:.1f} M")
    print(f"measured SGEMM peak: {peak:.1f} GFLOP/s")
    for name, tps in (("tidal", tidal_tps), (f"PyTorch {torch_version}", torch_tps)):
        gflops = tps * flops_per_token / 1e9
        print(f"{name:<16} {tps:9.0f} tokens/s  {gflops:7.1f} GFLOP/s  {100 * gflops / peak:5.1f}% of SGEMM peak")
    print(f"ratio tidal / PyTorch: {tidal_tps / torch_tps:.2f}x")


if __name__ == "__main__":
    main()
