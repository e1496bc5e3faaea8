"""End-to-end GPT-2 training on a GPU: tidal, PyTorch eager (SDPA) and torch.compile, one after
the other in one run, each in a process of its own with the GPU to itself; same shape, global
batch, precision, AdamW and clipping (bench/gpt_training.py). Prints per system tokens/s, MFU,
step time and peak memory, the ratios tidal / PyTorch, and one JSON line per system at the end.

    python3 bench/gpu_train.py --tidal .gpu/bin/tidal [--model 124m|1.5b|tiny] [--batch B]
        [--steps N] [--precision bf16|fp16|fp32|fp8] [--device cuda|cpu] [--systems tidal,eager,compile]
        [--peak-tflops F] [--vocab V] [--quick]

Timing: the first 3 steps of each system are warm-up (torch.compile compiles there); tidal's
tokens/s come from its metrics (each step's step_time_s, synchronised at the step's end),
PyTorch's from its timed steps run back to back. MFU = tokens/s * (6N + 6LCT) / peak, the
dense tensor-core peak of the GPU (bf16 / fp16; TF32's for fp32); n/a on a CPU. Peak memory:
the GPU's memory in use while the system ran (nvidia-smi; CUDA context and caching pools
included, so the systems compare as processes), on a CPU the process's peak resident set.
Data: tidal trains on its built-in Markov language, PyTorch on one random batch; both over the
model's vocabulary, so the shapes and the work are the same. --device cpu --model tiny checks
the plumbing on a machine without a GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_training import OPTIMIZER, GptShape, run_tidal, tidal_sets, tidal_speed  # noqa: E402

# GPT-2 vocabulary 50257 padded to 50304 (a multiple of 128) as llm.c and nanoGPT train it, so
# the LM head's GEMMs are tensor-core aligned on both sides; --vocab 50257 for the original.
VOCAB = 50304
MODELS = {  # shape, default global batch (sequences)
    "tiny": (GptShape(n_layer=2, n_embd=128, n_head=4, vocab_size=512, seq_len=128), 8),
    "124m": (GptShape(n_layer=12, n_embd=768, n_head=12, vocab_size=VOCAB, seq_len=1024), 32),
    "1.5b": (GptShape(n_layer=48, n_embd=1600, n_head=25, vocab_size=VOCAB, seq_len=1024), 8),
}
WARMUP = 3
# Dense tensor-core peaks in FLOP/s: (bf16 and fp16, TF32 for fp32), by the name torch reports;
# the first match wins (an H200 has the H100 SXM's compute).
PEAKS = [("H100 PCIe", 756e12, 378e12), ("H100 NVL", 835e12, 418e12), ("H100", 989e12, 494e12),
         ("H200 NVL", 835e12, 418e12), ("H200", 989e12, 494e12)]
SYSTEMS = ("tidal", "eager", "compile")


class MeasuredRun:
    """Runs a command to its end, as subprocess.run does, and keeps its peak memory in
    `peak_bytes`: on cuda the GPU's memory in use above what it was before (nvidia-smi, polled
    while it runs: the caching pools hold their high-water mark; one GPU), else the process's
    peak resident set."""

    def __init__(self, device):
        self.device = device
        self.peak_bytes = None

    def __call__(self, cmd, env=None, check=True, stdout=None):
        samples, done = [], threading.Event()

        def poll_gpu():
            while not done.is_set():
                samples.append(gpu_memory_used())

        poller = threading.Thread(target=poll_gpu)
        if self.device == "cuda":
            before = gpu_memory_used()
            poller.start()
        proc = subprocess.Popen(cmd, env=env, stdout=stdout)
        _, status, usage = os.wait4(proc.pid, 0)  # wait4: the resource use of this child alone
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        if self.device == "cuda":
            poller.join()
            self.peak_bytes = max(samples + [before]) - before
        else:
            self.peak_bytes = usage.ru_maxrss * 1024
        if check and proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
        return proc


def gpu_memory_used():
    """Bytes in use on the GPU, all processes (nvidia-smi: no CUDA context in this process)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], check=True,
                         capture_output=True, text=True).stdout
    return max(map(int, out.split())) * 2**20


def torch_facts(device):
    """(torch version, device name) from a process of its own: this one keeps off the GPU."""
    code = ("import json, torch; print(json.dumps([torch.__version__, "
            "torch.cuda.get_device_name() if torch.cuda.is_available() else None]))")
    version, name = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                              text=True).stdout)
    if device == "cuda" and name is None:
        sys.exit(f"gpu_train: --device cuda, but torch {version} sees no GPU (check nvidia-smi and "
                 "CUDA_VISIBLE_DEVICES), or run --device cpu")
    return version, name if device == "cuda" else "CPU"


def peak_flops(name, precision, override_tflops):
    if override_tflops:
        return override_tflops * 1e12
    for key, half, tf32 in PEAKS:
        if name and key in name:
            return tf32 if precision == "fp32" else half  # fp8: against the bf16 peak
    return None


def run_tidal_system(args, shape, batch):
    measure = MeasuredRun(args.device)
    records = run_tidal(args.tidal, tidal_sets(shape, batch, args.steps, args.precision, args.device),
                        start=measure)
    tokens_per_s, step_s, summary = tidal_speed(records, shape, batch, WARMUP)
    return {"system": "tidal", "tokens_per_s": tokens_per_s, "step_s": step_s,
            "final_loss": summary["final_train_loss"], "peak_memory_bytes": measure.peak_bytes}


def run_torch_system(args, shape, batch, mode):
    job = {"shape": shape.__dict__, "batch": batch, "steps": args.steps, "warmup": WARMUP,
           "precision": args.precision, "device": args.device, "mode": mode}
    measure = MeasuredRun(args.device)
    with tempfile.TemporaryFile("w+") as out:
        measure([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_training.py"),
                 json.dumps(job)], stdout=out)
        out.seek(0)
        record = json.loads(out.read().splitlines()[-1])
    if "tokens_per_s" in record:
        record["peak_memory_bytes"] = measure.peak_bytes
    return record


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tidal", required=True, help="the tidal program (build/src/tidal, .gpu/bin/tidal)")
    ap.add_argument("--model", choices=MODELS, default="124m")
    ap.add_argument("--batch", type=int, help="global batch in sequences (default: the model's)")
    ap.add_argument("--steps", type=int, help=f"steps per system, the first {WARMUP} not timed "
                    "(default 30; 10 with --quick or on the CPU)")
    ap.add_argument("--precision", choices=("bf16", "fp16", "fp32", "fp8"), default="bf16",
                    help="fp8: tidal's train.precision = \"fp8\" (tidal alone; MFU against the bf16 peak)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="which of tidal,eager,compile to run")
    ap.add_argument("--peak-tflops", type=float, help="the device's peak for the MFU (default: known by GPU name)")
    ap.add_argument("--vocab", type=int, help=f"vocabulary (default: the model's; GPT-2's padded to {VOCAB})")
    ap.add_argument("--quick", action="store_true", help="10 steps per system")
    args = ap.parse_args()
    args.steps = args.steps or (10 if args.quick or args.device == "cpu" else 30)
    args.systems = args.systems.split(",")
    if not set(args.systems) <= set(SYSTEMS) or args.steps <= WARMUP:
        ap.error(f"--systems takes some of {','.join(SYSTEMS)}; --steps must exceed the {WARMUP} warm-up steps")
    if args.precision == "fp8" and (args.systems != ["tidal"] or args.device != "cuda"):
        ap.error("--precision fp8 is tidal's alone here, on a GPU: --systems tidal --device cuda")
    if args.device == "cpu" and args.precision == "fp16":
        ap.error("--precision fp16 needs --device cuda (PyTorch has no fp16 autocast on the CPU)")
    return args


def print_config(args, shape, batch, device_name, peak, torch_version):
    o = OPTIMIZER
    print(f"config: {args.model}: {shape.describe()}; global batch {batch} x {shape.seq_len} = "
          f"{batch * shape.seq_len} tokens per step; {args.precision} (bf16 / fp16: fp32 master weights, "
          f"PyTorch by autocast); AdamW lr {o['lr']}, betas {o['beta1']}/{o['beta2']}, weight decay "
          f"{o['weight_decay']}, clipping at {o['grad_clip']}; {args.steps} steps per system, {WARMUP} warm-up")
    print(f"device: {device_name}; peak {f'{peak / 1e12:.0f} TFLOP/s dense' if peak else 'unknown (MFU n/a)'}; "
          f"PyTorch {torch_version}; tidal {args.tidal}")
    print(f"N = {shape.parameters() - shape.seq_len * shape.n_embd:,} parameters (all but the position embedding, "
          f"tied LM head once); model FLOPs per token 6N + 6LCT = {shape.flops_per_token() / 1e9:.3f} GFLOP")


def print_results(results, flops, peak):
    """The table and the ratios; adds mfu and tidal_ratio to the records."""
    print(f"\n{'system':<22} {'tokens/s':>12} {'MFU':>7} {'step ms':>9} {'peak memory':>12}  notes")
    for r in results:
        if "tokens_per_s" not in r:
            why = "skipped: " + r["skipped"] if "skipped" in r else "FAILED: " + r["failed"]
            print(f"{r['system']:<22} {'':>12} {'':>7} {'':>9} {'':>12}  {why}")
            continue
        r["mfu"] = r["tokens_per_s"] * flops / peak if peak else None
        mfu = f"{r['mfu']:.1%}" if peak else "n/a"
        notes = ", ".join(r[k] for k in ("attention", "optimizer") if k in r)
        print(f"{r['system']:<22} {r['tokens_per_s']:>12,.0f} {mfu:>7} {1e3 * r['step_s']:>9.1f} "
              f"{r['peak_memory_bytes'] / 2**30:>8.2f} GiB  {notes}")
    tidal = next((r for r in results if r["system"] == "tidal" and "tokens_per_s" in r), None)
    for r in results:
        if tidal and r is not tidal and "tokens_per_s" in r:
            r["tidal_ratio"] = tidal["tokens_per_s"] / r["tokens_per_s"]
            print(f"ratio tidal / {r['system']}: {r['tidal_ratio']:.2f}x")


def main():
    args = parse_args()
    shape, batch = MODELS[args.model]
    if args.vocab:
        shape = GptShape(**dict(shape.__dict__, vocab_size=args.vocab))
    batch = args.batch or batch
    torch_version, device_name = torch_facts(args.device)
    peak = peak_flops(device_name, args.precision, args.peak_tflops) if args.device == "cuda" else None
    print_config(args, shape, batch, device_name, peak, torch_version)
    results = []
    for system in args.systems:
        t0 = time.perf_counter()
        try:
            if system == "tidal":
                r = run_tidal_system(args, shape, batch)
            else:
                r = run_torch_system(args, shape, batch, system)
        except subprocess.CalledProcessError as e:
            r = {"failed": f"exit {e.returncode}"}
        r.setdefault("system", system)
        r["wall_s"] = time.perf_counter() - t0
        results.append(r)
    flops = shape.flops_per_token()
    print_results(results, flops, peak)
    for r in results:
        print(json.dumps(dict(r, model=args.model, shape=shape.__dict__, batch=batch, precision=args.precision,
                              device=device_name, peak_flops=peak, flops_per_token=flops)))
    return 1 if any("failed" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
