"""Where a GPU training step's time goes, tidal beside PyTorch eager, op family by op family: the
question to answer before speeding up a kernel (bench/gpu_train.py gives only the totals).

    python3 bench/gpu_step_profile.py --tidal .gpu/bin/tidal [--model 124m|1.5b|tiny] [--batch B]
        [--steps N] [--precision bf16|fp16|fp32] [--top K]

tidal: `train.profile = true` under CUDA_LAUNCH_BLOCKING=1, so that each op's wall time (what the
profile records) holds its kernels' time rather than their launch; each op then also pays a
launch's round trip (some microseconds), so the families' sum runs above the unprofiled step.
PyTorch: eager (SDPA, fused AdamW; bench/gpt_training.py's step) under torch.profiler, each CUDA
kernel's device time put in the family its name says (the FAMILIES patterns below, first match;
the rest is elementwise), plus its K longest kernels by name. Same shape, batch and precision on
both sides; per step, averaged over the steps after the warm-up.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_training import run_tidal, tidal_sets, torch_gpt, OPTIMIZER  # noqa: E402
from gpu_train import MODELS  # noqa: E402

WARMUP = 3
# PyTorch / cuBLAS / cuDNN kernel names -> tidal's op families (core/profile.h): the first pattern
# found in the name, any case.
FAMILIES = [
    ("attention", r"flash|fmha|attention|sdpa|cudnn"),
    ("gemm", r"gemm|sm90_xmma|nvjet|cutlass|cublas|splitk"),
    ("layernorm", r"layer_norm|layernorm|rms_norm"),
    ("gelu", r"gelu"),
    ("cross_entropy", r"softmax|nll_loss|cross_entropy"),
    ("optimizer", r"adam|multi_tensor|lpnorm|norm_kernel|foreach"),
    ("copy_cast", r"copy"),
]


def family_of(kernel):
    for family, pattern in FAMILIES:
        if re.search(pattern, kernel, re.IGNORECASE):
            return family
    return "elementwise"


def profile_tidal(args, shape, batch):
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    sets = tidal_sets(shape, batch, args.steps, args.precision, "cuda") + ["train.profile=true"]
    records = run_tidal(args.tidal, sets, env=env)
    summary = [r for r in records if r.get("summary")][-1]
    p = summary["profile"]
    return p["step_s"], p["ops_s"], p["modules_s"]


def profile_torch(args, shape, batch):
    """Runs in a process of its own (this one keeps off the GPU): see main's --torch-child."""
    job = {"model": args.model, "batch": batch, "steps": args.steps, "precision": args.precision, "top": args.top}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-child", json.dumps(job)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


def torch_child(job):
    import torch
    from torch.profiler import ProfilerActivity, profile
    shape, _ = MODELS[job["model"]]
    batch, steps, top = job["batch"], job["steps"], job["top"]
    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high")
    with torch.device("cuda"):
        model, _ = torch_gpt(shape)
    model.cuda()
    o = OPTIMIZER
    opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=1e-8,
                            weight_decay=o["weight_decay"], fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(job["precision"])
    tokens = torch.randint(shape.vocab_size, (batch, shape.seq_len), device="cuda")
    targets = torch.randint(shape.vocab_size, (batch, shape.seq_len), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        opt.step()

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    timed = steps - WARMUP
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(timed):
            step()
        end.record()
        torch.cuda.synchronize()
    families, kernels = {}, []
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        s = us * 1e-6 / timed
        families[family_of(e.key)] = families.get(family_of(e.key), 0.0) + s
        kernels.append((s, e.count // timed, e.key[:110]))
    kernels.sort(reverse=True)
    print(json.dumps({"step_s": start.elapsed_time(end) * 1e-3 / timed, "ops_s": families,
                      "kernels": kernels[:top], "torch": torch.__version__}))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-child":
        torch_child(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tidal", required=True, help="the tidal program")
    ap.add_argument("--model", choices=MODELS, default="124m")
    ap.add_argument("--batch", type=int, help="global batch in sequences (default: the model's)")
    ap.add_argument("--steps", type=int, default=8, help=f"steps per system, the first {WARMUP} not counted")
    ap.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    ap.add_argument("--top", type=int, default=15, help="PyTorch's longest kernels listed")
    args = ap.parse_args()
    if args.steps <= WARMUP:
        ap.error(f"--steps must exceed the {WARMUP} warm-up steps")
    shape, batch = MODELS[args.model]
    batch = args.batch or batch
    print(f"config: {args.model}: {shape.describe()}; batch {batch} x {shape.seq_len}; {args.precision}; "
          f"{args.steps} steps, {WARMUP} warm-up")
    t_step, t_ops, t_modules = profile_tidal(args, shape, batch)
    torch_rec = profile_torch(args, shape, batch)
    p_step, p_ops = torch_rec["step_s"], torch_rec["ops_s"]
    print(f"step: tidal {1e3 * t_step:.1f} ms (launch-blocking: each op synchronised), PyTorch "
          f"{torch_rec['torch']} eager {1e3 * p_step:.1f} ms (profiled)")
    print(f"{'op family':<16} {'tidal ms':>10} {'PyTorch ms':>11} {'tidal/PyTorch':>14}")
    for f in sorted(set(t_ops) | set(p_ops), key=lambda f: -max(t_ops.get(f, 0), p_ops.get(f, 0))):
        t, p = 1e3 * t_ops.get(f, 0.0), 1e3 * p_ops.get(f, 0.0)
        print(f"{f:<16} {t:>10.2f} {p:>11.2f} {t / p if p else float('nan'):>14.2f}")
    print(f"{'(sum)':<16} {1e3 * sum(t_ops.values()):>10.2f} {1e3 * sum(p_ops.values()):>11.2f}")
    print("tidal by module: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in
                                          sorted(t_modules.items(), key=lambda kv: -kv[1])))
    print("PyTorch's longest kernels (ms per step, launches per step, name):")
    for s, n, name in torch_rec["kernels"]:
        print(f"  {1e3 * s:8.2f} {n:5d}  {name}")
    print(json.dumps({"tidal": {"step_s": t_step, "ops_s": t_ops}, "pytorch": {"step_s": p_step, "ops_s": p_ops}}))


if __name__ == "__main__":
    main()
