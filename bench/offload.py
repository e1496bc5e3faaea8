#!/usr/bin/python3
"""Heterogeneous memory: bytes moved between the device tier and the host per iteration.

For two GPTs whose model data is large beside their activations (fp32 and bf16 mixed precision),
trains a few steps under memory.device_limit at two caps - a tight one, where the param chunks
and the activations do not fit together so chunks must be evicted, and a roomier one - with
memory.offload = chunk (Belady's eviction, then LRU's) and with the static partition
(memory.offload = static: ZeRO-Offload's split, every param chunk on the device, optimizer states
and Adam on the host). Prints, per run, the bytes moved per iteration after the warm-up (both
ways, from tidal's per-step metrics), the evictions, the device tier's measured peak against the
cap, and each as a ratio to Belady; a run that does not fit prints tidal's error (what the static
partition needs). Every run that trains must end with the same final eval loss as Belady's.

usage: bench/offload.py [--build build] [--steps 6] [--verify]
  --verify: exit 1 unless Belady <= LRU wherever chunks were evicted, every peak is within its
  cap, and the losses agree.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (name, model keys, precision, caps as fractions of the model data: the param list is 1/4 of it
# in fp32 and 1/7 in bf16, so the first cap makes chunks evict and the second leaves a margin)
MODELS = [
    ("GPT 4 x 384, fp32", dict(n_layer=4, n_embd=384, n_head=4, seq_len=32), "fp32", [0.25, 0.45]),
    ("GPT 6 x 320, bf16", dict(n_layer=6, n_embd=320, n_head=4, seq_len=32), "bf16", [0.15, 0.3]),
]
BATCH = 2
MODES = [("chunk, belady", ["memory.offload=chunk", "memory.eviction=belady"]),
         ("chunk, lru", ["memory.offload=chunk", "memory.eviction=lru"]),
         ("static", ["memory.offload=static"])]


def train(build, steps, model, precision, sets):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [os.path.join(build, "src", "tidal"), "train", "--metrics", metrics]
        args = [f"model.{k}={v}" for k, v in model.items()]
        args += [f"train.batch_size={BATCH}", f"train.steps={steps}", "train.eval_every=0", "train.eval_batches=1",
                 f"train.precision={precision}", "memory.chunk_size=600000"]
        for s in args + sets:
            cmd += ["--set", s]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        if done.returncode != 0:
            return {"error": done.stderr.strip().splitlines()[-1]}
        rows = [json.loads(line) for line in open(metrics)]
    steps_rows = [r for r in rows if "loss" in r and not r.get("summary")]
    after = steps_rows[1:]  # the first is the warm-up
    summary = rows[-1]
    offload = summary["model_data"].get("offload", {})
    return {
        "moved": sum(r["bytes_host_to_device"] + r["bytes_device_to_host"] for r in after) / len(after),
        "evictions": sum(r["evictions"] for r in after) / len(after),
        "peak": offload.get("device_peak_bytes", 0),
        "model_data": summary["model_data"]["model_data_bytes"],
        "final_loss": summary["final_loss"],
    }


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args()
    ok = True
    print(f"# batch {BATCH}, chunk 600000 elements, {a.steps} steps, moves per iteration averaged after the warm-up")
    print(f"{'model':<20} {'cap':>16} {'mode':<14} {'moved / iteration':>18} {'x belady':>9} {'evictions':>9} "
          f"{'device peak':>12}  final loss")
    for name, model, precision, caps in MODELS:
        # The model data, from an uncapped run of the same chunks.
        whole = train(a.build, 2, model, precision, ["memory.offload=chunk", "memory.device_limit=64GiB"])
        for fraction in caps:
            cap = int(whole["model_data"] * fraction)
            results = {}
            for mode, sets in MODES:
                results[mode] = train(a.build, a.steps, model, precision, sets + [f"memory.device_limit={cap}"])
            base = results["chunk, belady"]
            for mode, _ in MODES:
                r = results[mode]
                label = f"{fraction:.0%} = {mib(cap)}"
                if "error" in r:
                    print(f"{name:<20} {label:>16} {mode:<14} does not fit: {r['error']}")
                    continue
                ratio = r["moved"] / base["moved"] if "moved" in base and base["moved"] else float("nan")
                print(f"{name:<20} {label:>16} {mode:<14} {mib(r['moved']):>18} {ratio:>9.2f} {r['evictions']:>9.1f} "
                      f"{mib(r['peak']):>12}  {r['final_loss']:.6f}")
                if r["peak"] > cap:
                    ok = False
                if "final_loss" in base and r["final_loss"] != base["final_loss"]:
                    ok = False
            lru = results["chunk, lru"]
            if "error" not in base and "error" not in lru and lru["evictions"] > 0 and base["moved"] > lru["moved"]:
                ok = False
    print("verify: ok" if ok else "verify: FAILED")
    if a.verify and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
