#!/usr/bin/python3
"""CPU training speed: tidal against today's PyTorch, one system after the other in one run, on the
same threads, model, batch, precision, AdamW and clipping (bench/gpt_training.py).

Systems, each in a process of its own:
  - tidal fp32 and bf16 (bf16: parameters and activations in bf16, fp32 master weights and AdamW),
    with train.profile = true: its profile (time per op family and module kind) is printed;
  - PyTorch 2.x from PyPI, installed on first use into a virtual environment of this benchmark's
    own (--venv): eager (SDPA, fused AdamW) and torch.compile, fp32 and bf16 autocast;
  - Debian's PyTorch 1.13 (python3-torch), eager, fp32 and bf16 autocast.
Shapes: the reference GPT (6 layers, width 384, 6 heads, vocab 512, seq_len 256, batch 8),
GPT-2 small (12 layers, width 768, 12 heads, vocab 50,257, seq_len 1024, batch 2), and
configs/llama-tiny.toml's Llama with its batch (PyTorch's side: transformers' LlamaForCausalLM,
installed beside PyTorch 2.x).

Prints per shape and system tokens/s, model FLOP/s (6N + 6LCT per token) against this machine's
GEMM peak for the precision (measured in the same run by bench_cpu_ops --peak-only), and the
ratio tidal / system of the same precision; then tidal's profiles; one JSON line per run last.
With --rounds N each system runs N times, round-robin (a shared machine's slow spells then fall on
every system alike), and reports its median run beside the range of its runs.

usage: bench/cpu_train_vs_torch.py [--build build] [--threads 2] [--shapes reference,gpt2-small,llama-tiny]
           [--systems tidal,eager,compile,torch1] [--precisions fp32,bf16] [--steps N] [--rounds N]
           [--venv DIR] [--quick]
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_training import GptShape, LlamaShape, run_tidal, tidal_sets, tidal_speed  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {  # name: (shape, batch, steps)
    "reference": (GptShape(n_layer=6, n_embd=384, n_head=6, vocab_size=512, seq_len=256), 8, 10),
    "gpt2-small": (GptShape(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, seq_len=1024), 2, 6),
    "llama-tiny": (*LlamaShape.from_toml(os.path.join(ROOT, "configs", "llama-tiny.toml")), 20),
}
WARMUP = 3
# PyPI's Linux wheel with its requirements: it links the CUDA libraries those bring (a few GB) and
# does not import without them, even on a CPU.
TORCH2 = ["torch>=2.4,<3", "numpy<2", "transformers==4.40.2"]
DEFAULT_VENV = os.path.join(os.path.expanduser("~"), ".cache", "tidal", "bench-torch2")


def blas_kernels():
    """The OpenBLAS kernels tidal selects for this CPU; Debian's PyTorch 1.13 gets the same."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return os.environ["OPENBLAS_CORETYPE"]
    flags = open("/proc/cpuinfo").read()
    if all(f" {f} " in flags for f in ("avx512f", "avx512bw", "avx512vl")):
        return "SkylakeX"
    if " avx2 " in flags and " fma " in flags:
        return "Haswell"
    return None


def torch2_python(venv):
    """The venv's python with PyTorch 2.x, installing it on first use."""
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", "import torch, transformers, sys; sys.exit(0 if torch.__version__ >= '2' else 1)"]
    if os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"installing PyTorch 2.x and transformers from PyPI into {venv} (a few GB, once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + TORCH2, check=True)
    subprocess.run(probe, check=True)
    return python


def torch1_python(shape):
    """Debian's python3-torch; for a Llama, the test setup's oracle venv over it, which adds
    transformers (scripts/oracle-venv.sh: $TIDAL_ORACLE_VENV or ~/.cache/tidal/oracle-venv)."""
    if not isinstance(shape, LlamaShape):
        return "/usr/bin/python3"
    venv = os.environ.get("TIDAL_ORACLE_VENV", os.path.join(os.path.expanduser("~"), ".cache", "tidal", "oracle-venv"))
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "oracle-venv.sh")], check=True)
    return python


def gemm_peaks(build, env):
    """{precision: GFLOP/s} measured now by bench_cpu_ops, and the library that runs tidal's GEMMs."""
    out = subprocess.run([os.path.join(build, "bench", "bench_cpu_ops"), "--peak-only"], check=True, env=env,
                         capture_output=True, text=True).stdout
    peaks = {"fp32": float(re.search(r"fp32 GEMM peak: ([0-9.]+) GFLOP/s", out).group(1)),
             "bf16": float(re.search(r"bf16 GEMM peak: ([0-9.]+) GFLOP/s", out).group(1))}
    library = re.search(r"CPU GEMM: (.*)", out).group(1)
    return peaks, library


def run_tidal_cpu(build, shape, batch, steps, precision, env):
    sets = tidal_sets(shape, batch, steps, precision, "cpu") + ["data.markov_branching=8", "train.profile=true"]
    records = run_tidal(os.path.join(build, "src", "tidal"), sets, env=env)
    tps, _, summary = tidal_speed(records, shape, batch, WARMUP)
    return {"system": "tidal", "tokens_per_s": tps, "profile": summary.get("profile")}


def run_torch(python, shape, batch, steps, precision, mode, threads, env, warmup=WARMUP, micro_batches=1):
    job = {"shape": shape.__dict__, "batch": batch, "steps": steps, "warmup": warmup, "precision": precision,
           "device": "cpu", "mode": mode, "threads": threads, "micro_batches": micro_batches}
    proc = subprocess.run([python, os.path.join(ROOT, "bench", "gpt_training.py"), json.dumps(job)], env=env,
                          capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"failed": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


def median_run(runs):
    """The run of median tokens/s among a system's rounds (a failed round: the first failure), with
    every round's tokens/s beside it."""
    done = sorted((r for r in runs if "tokens_per_s" in r), key=lambda r: r["tokens_per_s"])
    if len(done) < len(runs):
        return dict(next(r for r in runs if "tokens_per_s" not in r), rounds_tokens_per_s=[])
    return dict(done[(len(done) - 1) // 2], rounds_tokens_per_s=[r["tokens_per_s"] for r in runs])


def label(record):
    if record["system"] == "tidal":
        return "tidal"
    extras = [x for x in (record.get("attention", "").split(" ")[0], record.get("optimizer")) if x]
    return f"PyTorch {record['torch'].split('+')[0]} {record['system'].split(' ', 1)[1]} ({', '.join(extras)})"


def print_profile(precision, profile):
    if not profile:
        return
    step = profile["step_s"]
    print(f"  tidal {precision} profile, {1e3 * step:.1f} ms per step:")
    for view, title in (("ops_s", "op family"), ("modules_s", "module")):
        rows = sorted(profile[view].items(), key=lambda kv: -kv[1])
        cells = [f"{name} {1e3 * s:.1f} ms ({100 * s / step:.0f}%)" for name, s in rows if s >= 5e-4 * step]
        print(f"    by {title}: " + ", ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--shapes", default="reference,gpt2-small,llama-tiny")
    ap.add_argument("--systems", default="tidal,eager,compile,torch1")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=0, help="steps per run, the first 3 untimed (default: per shape)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of each system, round-robin; each reports its median run (default 1)")
    ap.add_argument("--venv", default=DEFAULT_VENV, help="where PyTorch 2.x is installed on first use")
    ap.add_argument("--quick", action="store_true", help="reference shape only, 5 steps")
    args = ap.parse_args()
    shapes = ["reference"] if args.quick else args.shapes.split(",")
    systems, precisions = args.systems.split(","), args.precisions.split(",")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    kernels = blas_kernels()
    if kernels:
        env["OPENBLAS_CORETYPE"] = kernels
    torch2 = torch2_python(args.venv) if {"eager", "compile"} & set(systems) else None

    peaks, library = gemm_peaks(args.build, env)
    print(f"config: {args.threads} threads; tidal's CPU GEMM: {library}; OpenBLAS kernels {kernels or 'default'}; "
          f"AdamW (lr 3e-4, betas 0.9/0.95, weight decay 0.1) + clip 1.0; first {WARMUP} steps of each run untimed")
    print("GEMM peak measured now: " + ", ".join(f"{p} {g:.1f} GFLOP/s" for p, g in peaks.items()))
    results = []
    for name in shapes:
        shape, batch, steps = SHAPES[name]
        steps = 5 if args.quick else (args.steps or steps)
        flops = shape.flops_per_token()
        print(f"\n== {name}: {shape.describe()}, batch {batch}, {steps} steps; {flops / 1e6:.1f} MFLOP per token")
        print(f"  {'system':<52} {'prec':<5} {'tokens/s':>9} {'GFLOP/s':>8} {'% peak':>7} {'tidal/it':>9}")
        profiles = {}
        for precision in precisions:
            # Each system `rounds` times, round-robin, so a slow spell of a shared machine falls on
            # all of them alike; a system's figure is its median run.
            rounds = {}
            for _ in range(args.rounds):
                if "tidal" in systems:
                    rounds.setdefault("tidal", []).append(run_tidal_cpu(args.build, shape, batch, steps, precision, env))
                for mode in ("eager", "compile"):
                    if mode in systems:
                        rounds.setdefault(mode, []).append(
                            run_torch(torch2, shape, batch, steps, precision, mode, args.threads, env))
                if "torch1" in systems:
                    rounds.setdefault("torch1", []).append(
                        run_torch(torch1_python(shape), shape, batch, steps, precision, "eager", args.threads, env))
            runs = [median_run(r) for r in rounds.values()]
            if "tidal" in systems:
                profiles[precision] = runs[0]["profile"]
            tidal_tps = runs[0]["tokens_per_s"] if "tidal" in systems else None
            for r in runs:
                r.update(shape=name, precision=precision)
                results.append(r)
                if "tokens_per_s" not in r:
                    print(f"  {r.get('system', '?'):<52} {precision:<5} {'—':>9}  {r.get('failed') or r.get('skipped')}")
                    continue
                gflops = r["tokens_per_s"] * flops / 1e9
                ratio = f"{tidal_tps / r['tokens_per_s']:.2f}x" if tidal_tps else ""
                spread = (f"  (runs {min(r['rounds_tokens_per_s']):.0f}-{max(r['rounds_tokens_per_s']):.0f})"
                          if len(r["rounds_tokens_per_s"]) > 1 else "")
                print(f"  {label(r):<52} {precision:<5} {r['tokens_per_s']:9.0f} {gflops:8.1f} "
                      f"{100 * gflops / peaks[precision]:6.1f}% {ratio:>9}{spread}", flush=True)
        for precision, profile in profiles.items():
            print_profile(precision, profile)
    print()
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
