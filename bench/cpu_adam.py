#!/usr/bin/python3
"""CPU AdamW: parameters per second, tidal's kernel against PyTorch's, on the same tensors.

The update that hybrid Adam runs on host-resident chunks (patrickstar-v2 section 7.2; DeepSpeed
reports 5-6x over PyTorch's CPU Adam for its own). Draws one fp32 parameter tensor and one
gradient, applies AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01) K+1 times with
PyTorch - its default single-tensor loop, then foreach=True - and with build/bench/bench_cpu_adam
on the same bytes; times the last K steps of each (median), prints params/s and the ratios, and
checks that tidal's parameters after the K+1 steps agree with PyTorch's. tidal also runs with
fp16 and bf16 gradients (widened on the fly, as mixed precision hands them over), which PyTorch's
AdamW does not take for fp32 parameters.

usage: bench/cpu_adam.py [--build build] [--numel 16777216] [--steps 10] [--threads N] [--verify]
  --verify: exit 1 unless tidal's parameters match PyTorch's (|difference| <= 2e-6 x max(1, |p|):
  fp32 rounding over the steps) and tidal is faster than PyTorch's default AdamW.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def torch_adamw(param0, grad, steps, foreach):
    p = param0.clone()
    p.grad = grad.clone()
    opt = torch.optim.AdamW([p], foreach=foreach, **ADAMW)
    opt.step()
    seconds = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.step()
        seconds.append(time.perf_counter() - t0)
    seconds.sort()
    return p.detach(), seconds[len(seconds) // 2]


def tidal_adamw(build, raw_in, numel, steps, grad, threads, out_path):
    cmd = [os.path.join(build, "bench", "bench_cpu_adam"), "--numel", str(numel), "--steps", str(steps), "--grad", grad,
           "--in", raw_in]
    if out_path:
        cmd += ["--out", out_path]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--numel", type=int, default=1 << 24)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(0)
    param0 = torch.randn(args.numel, generator=gen)
    grad = torch.randn(args.numel, generator=gen) * 1e-2
    print(f"# AdamW on {args.numel:,} fp32 parameters (lr 1e-3, weight decay 0.01), {args.steps} timed steps after "
          f"one, median; {args.threads} threads; PyTorch {torch.__version__}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        raw_in, raw_out = os.path.join(tmp, "in.f32"), os.path.join(tmp, "out.f32")
        with open(raw_in, "wb") as f:
            f.write(param0.numpy().tobytes())
            f.write(grad.numpy().tobytes())
        ref, t_default = torch_adamw(param0, grad, args.steps, foreach=False)
        _, t_foreach = torch_adamw(param0, grad, args.steps, foreach=True)
        rows.append(("PyTorch AdamW (default, foreach=False)", "f32", args.numel / t_default))
        rows.append(("PyTorch AdamW (foreach=True)", "f32", args.numel / t_foreach))
        for g in ("f32", "f16", "bf16"):
            r = tidal_adamw(args.build, raw_in, args.numel, args.steps, g, args.threads, raw_out if g == "f32" else None)
            rows.append((f"tidal ops::adamw_step", g, r["params_per_s"]))
            if g == "f32":
                mine = torch.frombuffer(bytearray(open(raw_out, "rb").read()), dtype=torch.float32)
    diff = (mine - ref).abs().max().item()
    # fp32 rounding (fused multiply-adds here, separate passes there) over K+1 steps: relative to
    # the parameter's size.
    rel = ((mine - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
    base = rows[0][2]
    print(f"{'optimizer':<40} {'grads':<6} {'Mparams/s':>10} {'vs PyTorch default':>19} {'vs foreach':>11}")
    for name, g, rate in rows:
        print(f"{name:<40} {g:<6} {rate / 1e6:>10.1f} {rate / base:>18.2f}x {rate / rows[1][2]:>10.2f}x")
    tidal_rate = rows[2][2]
    print(f"ratio tidal / PyTorch (fp32 grads): {tidal_rate / base:.2f}x against the default, "
          f"{tidal_rate / rows[1][2]:.2f}x against foreach")
    print(f"parameters after {args.steps + 1} steps: max |tidal - PyTorch| = {diff:.3g}, "
          f"max |tidal - PyTorch| / max(1, |PyTorch|) = {rel:.3g}")
    if args.verify:
        ok = rel <= 2e-6 and tidal_rate > base
        print("verify:", "ok" if ok else "FAILED")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
