#!/usr/bin/python3
"""LoRA fine-tuning speed on the CPU, in one run on one machine: tidal's LoRA against Hugging Face
PEFT's (peft 0.11.1) on transformers' LlamaForCausalLM over today's PyTorch (2.x from PyPI, eager;
the venv of bench/cpu_train_vs_torch.py, peft installed into it on first use): the same shape,
batch, precision (bf16: autocast over an fp32 base on PyTorch's side; tidal holds the base in bf16),
adapters (rank, alpha, every linear of the blocks, no dropout), AdamW over the adapters and
clipping. Beside them, tidal's QLoRA (an NF4 base) and tidal's LoRA with the base streamed from the
host (finetune.base_offload = "host"), which PEFT has no CPU counterpart of here (bitsandbytes does
not install).

The shape is configs/llama-tiny.toml's (or --layers / --width / --intermediate / --seq-len / --batch
over it). Each system runs --rounds times round-robin and reports its median. Prints tokens/s and
the ratio tidal / PEFT with the config; one JSON line per run last.

usage: bench/lora_train.py [--build build] [--threads N] [--precisions fp32,bf16] [--steps 20] [--rounds 3]
           [--rank 16] [--alpha 32]
Run as `bench/lora_train.py --peft-job JSON` it is one PEFT run (the venv's python) printing one JSON line.
"""
import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_train_vs_torch import DEFAULT_VENV, blas_kernels, median_run, torch2_python  # noqa: E402
from gpt_training import OPTIMIZER, LlamaShape, print_job, run_tidal, tidal_sets, torch_llama  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP = 3
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PEFT = "peft==0.11.1"  # the version the oracle pins (over transformers 4.40.2)


def peft_python(venv):
    """The benchmark venv's python, with peft installed into it on first use."""
    python = torch2_python(venv)
    if subprocess.run([python, "-c", "import peft"], capture_output=True).returncode != 0:
        print(f"installing {PEFT} into {venv} ...", flush=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", PEFT], check=True)
    return python


def run_tidal_lora(build, shape, batch, steps, precision, rank, alpha, env, extra=()):
    sets = tidal_sets(shape, batch, steps, precision, "cpu") + [
        "data.markov_branching=8", "finetune.method=lora", f"finetune.lora_rank={rank}",
        f"finetune.lora_alpha={alpha}", "finetune.lora_targets=" + ",".join(TARGETS), *extra]
    records = run_tidal(os.path.join(build, "src", "tidal"), sets, env=env)
    steps_s = [r["step_time_s"] for r in records if "step_time_s" in r][WARMUP:]
    summary = [r for r in records if r.get("summary")][-1]
    return {"system": "tidal", "tokens_per_s": batch * shape.seq_len * len(steps_s) / sum(steps_s),
            "step_s": sum(steps_s) / len(steps_s), "parameters_trained": summary["parameters_trained"]}


def run_peft(python, shape, batch, steps, precision, rank, alpha, threads, env):
    job = {"shape": shape.__dict__, "batch": batch, "steps": steps, "precision": precision, "rank": rank,
           "alpha": alpha, "threads": threads}
    proc = subprocess.run([python, os.path.abspath(__file__), "--peft-job", json.dumps(job)], env=env,
                          capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"failed": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


def peft_train(shape, batch, steps, precision, rank, alpha, threads):
    """PEFT's LoRA on LlamaForCausalLM: forward, backward, clipping and AdamW over the adapters on
    one random batch; tokens/s over the steps after the warm-up."""
    import torch
    from peft import LoraConfig, get_peft_model
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, attention = torch_llama(LlamaShape(**shape))
    model.hf = get_peft_model(model.hf, LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                                                   target_modules=TARGETS))
    trained = [p for p in model.parameters() if p.requires_grad]
    o = OPTIMIZER
    fused = {"fused": True} if "fused" in inspect.signature(torch.optim.AdamW).parameters else {}
    opt = torch.optim.AdamW(trained, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=1e-8,
                            weight_decay=o["weight_decay"], **fused)
    shape = LlamaShape(**shape)
    tokens = torch.randint(shape.vocab_size, (batch, shape.seq_len))
    targets = torch.randint(shape.vocab_size, (batch, shape.seq_len))
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, o["grad_clip"])
        opt.step()
        return loss

    for _ in range(WARMUP):
        step()
    t0 = time.perf_counter()
    for _ in range(steps - WARMUP):
        loss = step()
    seconds = time.perf_counter() - t0
    return {"system": "PEFT", "torch": torch.__version__, "attention": attention,
            "parameters_trained": sum(p.numel() for p in trained),
            "tokens_per_s": batch * shape.seq_len * (steps - WARMUP) / seconds,
            "step_s": seconds / (steps - WARMUP), "final_loss": float(loss)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--venv", default=DEFAULT_VENV)
    ap.add_argument("--peft-job", help=argparse.SUPPRESS)
    for key in ("layers", "width", "intermediate", "seq_len", "batch"):
        ap.add_argument("--" + key.replace("_", "-"), type=int, default=0)
    args = ap.parse_args()
    if args.peft_job:
        print_job(peft_train, json.loads(args.peft_job))
        return
    shape, batch = LlamaShape.from_toml(os.path.join(ROOT, "configs", "llama-tiny.toml"))
    changes = {k: v for k, v in {"n_layer": args.layers, "n_embd": args.width, "intermediate_size": args.intermediate,
                                 "seq_len": args.seq_len}.items() if v}
    shape = dataclasses.replace(shape, **changes)
    batch = args.batch or batch
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if kernels := blas_kernels():
        env["OPENBLAS_CORETYPE"] = kernels
    python = peft_python(args.venv)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"config: {cpu}, {args.threads} threads; {shape.describe()}; batch {batch}; LoRA rank {args.rank}, alpha "
          f"{args.alpha:g} on {', '.join(TARGETS)}; {args.steps} steps a run, the first {WARMUP} untimed; "
          f"{args.rounds} rounds round-robin, medians")
    results = []
    for precision in args.precisions.split(","):
        variants = {"tidal LoRA": ()}
        if precision == "bf16":
            variants["tidal QLoRA (NF4 base)"] = ("finetune.base_dtype=nf4",)
            variants["tidal LoRA, base streamed from the host"] = ("finetune.base_offload=host",)
        rounds = {}
        for _ in range(args.rounds):
            for name, extra in variants.items():
                rounds.setdefault(name, []).append(run_tidal_lora(args.build, shape, batch, args.steps, precision,
                                                                  args.rank, args.alpha, env, extra))
            rounds.setdefault("PEFT", []).append(run_peft(python, shape, batch, args.steps, precision, args.rank,
                                                          args.alpha, args.threads, env))
        medians = {name: median_run(runs) for name, runs in rounds.items()}
        peft = medians["PEFT"]
        print(f"\n{precision}:")
        for name, r in medians.items():
            if "tokens_per_s" not in r:
                print(f"  {name:<42} {r.get('failed')}")
                continue
            label = f"PEFT {peft.get('torch', '').split('+')[0]}" if name == "PEFT" else name
            ratio = f"  {r['tokens_per_s'] / peft['tokens_per_s']:.2f}x PEFT" if name != "PEFT" and \
                "tokens_per_s" in peft else ""
            print(f"  {label:<42} {r['tokens_per_s']:8.0f} tokens/s (runs {min(r['rounds_tokens_per_s']):.0f}-"
                  f"{max(r['rounds_tokens_per_s']):.0f}; {r['parameters_trained']} trained){ratio}")
            results.append(dict(r, run=name, precision=precision, batch=batch, threads=args.threads))
    print()
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
