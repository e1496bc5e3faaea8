"""Chunk offload on the GPU (patrickstar-v2 Sec. 4): GPT-2 124M trained with its model data in
chunks (memory.offload = chunk), first with the whole GPU (uncapped), then with the GPU's tier
capped (memory.device_limit) at the activations' peak plus half the model data, so chunks move to pinned host memory and
back on the copy stream in every step. Prints both runs' tokens/s and their ratio, the bytes moved
and evictions per step, the GPU tier's peak against the cap, and checks that both runs give the
same losses bitwise (offload moves bytes; it must not change a number).

    python3 bench/gpu_offload.py --tidal .gpu/bin/tidal [--batch B] [--steps N] [--fraction F] [--quick]
    python3 bench/gpu_offload.py --tidal build/src/tidal --device cpu --model tiny   (the plumbing)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_training import run_tidal, tidal_sets, tidal_speed  # noqa: E402
from gpu_train import MODELS  # noqa: E402

WARMUP = 3


def steps_of(records):
    return [r for r in records if "loss" in r and not r.get("summary")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tidal", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--fraction", type=float, default=0.5, help="the GPU tier's cap, a fraction of the model data")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--quick", action="store_true", help="8 steps")
    ap.add_argument("--model", choices=MODELS, default="124m")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the plumbing, on a tiny model")
    args = ap.parse_args()
    steps = 8 if args.quick else args.steps
    shape, _ = MODELS[args.model]
    sets = tidal_sets(shape, args.batch, steps, args.precision, args.device) + ["memory.offload=chunk"]
    print(f"config: GPT-2 {args.model} ({shape.describe()}) on {args.device}, global batch {args.batch}, {args.precision}, {steps} steps "
          f"({WARMUP} warm-up), memory.offload=chunk; room on the GPU for {args.fraction:.0%} of the model data", flush=True)
    # On the CPU the device tier is host memory that always has a cap: a roomy one is "uncapped".
    uncapped = run_tidal(args.tidal, sets + (["memory.device_limit=64GiB"] if args.device == "cpu" else []))
    # The cap is on the GPU tier as a whole, activations included: the warm-up trace's peak of
    # non-model data, plus the fraction of the model data (at least what tidal says the run needs).
    summary = [r for r in uncapped if r.get("summary")][-1]["model_data"]
    model_data = summary["model_data_bytes"]
    non_model = max(m["non_model_bytes"] for m in summary["offload"]["trace"]["moments"])
    cap = max(int(non_model + model_data * args.fraction), summary["least_device_limit_bytes"])
    print(f"GPU tier: model data {model_data / 2**20:.1f} MiB, non-model peak {non_model / 2**20:.1f} MiB, "
          f"cap {cap / 2**20:.1f} MiB = non-model peak + {(cap - non_model) / model_data:.0%} of the model data "
          f"(tidal's least workable cap {summary['least_device_limit_bytes'] / 2**20:.1f} MiB)", flush=True)
    capped = run_tidal(args.tidal, sets + [f"memory.device_limit={cap}"])
    rows = {}
    for name, records in (("uncapped", uncapped), ("capped", capped)):
        tokens_per_s, step_s, summary = tidal_speed(records, shape, args.batch, WARMUP)
        timed = steps_of(records)[WARMUP:]
        moved = sum(r["bytes_host_to_device"] + r["bytes_device_to_host"] for r in timed) / len(timed)
        evictions = sum(r["evictions"] for r in timed) / len(timed)
        peak = summary["model_data"].get("offload", {}).get("device_peak_bytes")
        rows[name] = tokens_per_s
        print(f"{name:>9}: {tokens_per_s:>10,.0f} tokens/s, {step_s * 1e3:8.1f} ms/step, {moved / 2**20:8.1f} MiB "
              f"moved and {evictions:.1f} evictions per step, GPU tier peak "
              f"{'n/a' if peak is None else f'{peak / 2**20:.1f} MiB'} (model data {model_data / 2**20:.1f} MiB"
              f"{f', cap {cap / 2**20:.1f} MiB' if name == 'capped' else ''})")
    print(f"capped / uncapped tokens/s: {rows['capped'] / rows['uncapped']:.3f}")
    a = [r["loss"] for r in steps_of(uncapped)]
    b = [r["loss"] for r in steps_of(capped)]
    if a != b:
        worst = max(abs(x - y) for x, y in zip(a, b))
        print(f"FAIL: the losses differ (worst {worst:.3g}): uncapped {a} capped {b}")
        return 1
    print(f"losses bitwise equal over {len(a)} steps: {a[0]:.6f} ... {a[-1]:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
