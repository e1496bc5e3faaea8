#!/usr/bin/python3
"""Checkpoint saves measured on this machine (docs/checkpoints.md), in one run:

1. A composed 8-rank run - data 2 x pipeline 2 x 1D tensor 2, ZeRO-3, bf16, a Llama of 60M
   parameters - trains --steps steps three times: without checkpoints, saving every --every steps
   in the background (checkpoint.async = true), and saving synchronously. Prints the last
   asynchronous save rank by rank (its file's bytes and share of the checkpoint; the peak host
   bytes the save took beside the state it wrote and checkpoint.buffer_size), the losses of the
   background run against the run without saves (bitwise), and the median stall of the
   asynchronous saves against the synchronous ones. With --old-tidal (a tidal built before
   sharded checkpoints), the same run saved by it once: rank 0's host peak beyond the same run
   without a save (it gathered every tensor whole there).
2. The disk: `dd` writes 1 GiB with fsync (conv=fsync) beside the checkpoint directory, before
   and after; for each world size `mpirun -np N tidal calibrate` measures this machine before and
   after the runs (--hardware-dir keeps the files; --reuse-hardware takes them from there instead).
   Between them five layouts of a GPT of 23M parameters save synchronously and in the background
   every --every steps: the median save's slowest write, its stall and every rank's write
   throughput, beside the cost model's prediction (`tidal plan --configured`, the geometric mean of
   its predictions on the two calibrations): the write and the stall, their ratio, the stall's
   parts (the save's snapshot, the wait for its writer, the commit: in the background no part of
   the stall), and the median step right after a save (which a background writer runs beside)
   against the other steps.

usage: bench/checkpoint_save.py [--build build] [--steps 21] [--every 5] [--old-tidal PATH]
           [--hardware-dir DIR] [--reuse-hardware] [--only 1|2] [--dir DIR]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
LLAMA = ["model.type=llama", "model.n_layer=8", "model.n_embd=512", "model.n_head=8", "model.vocab_size=32000",
         "model.seq_len=128", "train.batch_size=8", "train.micro_batch_size=2", "train.eval_every=0",
         "train.eval_batches=1", "train.log_every=1"]
COMPOSED = ["parallel.data=2", "parallel.pipeline=2", "parallel.tensor.size=2", "zero.stage=3",
            "train.precision=bf16"]
GPT = ["model.n_layer=6", "model.n_embd=512", "model.n_head=8", "model.vocab_size=8192", "model.seq_len=128",
       "train.batch_size=8", "train.eval_every=0", "train.eval_batches=1", "train.log_every=1"]
LAYOUTS = [  # name, ranks, settings: the save's time against the cost model's
    ("one_fp32", 1, []),
    ("data2_zero1", 2, ["parallel.data=2", "zero.stage=1"]),
    ("tensor2_bf16", 2, ["parallel.tensor.size=2", "train.precision=bf16"]),
    ("data2_tensor2_zero2_bf16", 4, ["parallel.data=2", "parallel.tensor.size=2", "zero.stage=2",
                                     "train.precision=bf16"]),
    ("data2_pipeline2_tensor2_zero3", 8, ["parallel.data=2", "parallel.pipeline=2", "parallel.tensor.size=2",
                                          "zero.stage=3", "train.micro_batch_size=2"]),
]


def sets(settings):
    return [a for s in settings for a in ("--set", s)]


def train(tidal, ranks, settings, metrics, log):
    launch = MPIRUN + ["-np", str(ranks)] if ranks > 1 else []
    with open(log, "w") as out:
        r = subprocess.run(launch + [tidal, "train"] + sets(settings) + ["--metrics", metrics], stdout=out,
                           stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"FAIL: {log}:\n" + open(log).read()[-3000:])
    rows = [json.loads(line) for line in open(metrics)]
    losses = {r["step"]: r["loss"] for r in rows if "loss" in r and not r.get("summary")}
    saves = [r for r in rows if "checkpoint_step" in r]
    summary = [r for r in rows if r.get("summary")][-1]
    times = {r["step"]: r["step_time_s"] for r in rows if "step_time_s" in r and not r.get("summary")}
    summary["step_times"] = times
    return losses, saves, summary


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def part1(args, d):
    tidal = args.tidal
    base = LLAMA + COMPOSED + [f"train.steps={args.steps}"]
    saving = base + [f"checkpoint.every={args.every}", "checkpoint.keep=1"]
    plain, _, summary = train(tidal, 8, base, f"{d}/plain.jsonl", f"{d}/plain.log")
    params = summary["parameters"]
    background, saves_async, _ = train(tidal, 8, saving + [f"checkpoint.dir={d}/ck_async", "checkpoint.async=true"],
                                       f"{d}/async.jsonl", f"{d}/async.log")
    _, saves_sync, _ = train(tidal, 8, saving + [f"checkpoint.dir={d}/ck_sync", "checkpoint.async=false"],
                             f"{d}/sync.jsonl", f"{d}/sync.log")
    buffer = 256 * 2**20
    last = saves_async[-1]
    total = last["checkpoint_bytes"]
    print(f"\n1. data 2 x pipeline 2 x 1D tensor 2, ZeRO-3, bf16, Llama of {params / 1e6:.1f}M parameters, 8 ranks; "
          f"a save every {args.every} of {args.steps} steps")
    print(f"   the last background save (step {last['checkpoint_step']}): {mib(total)} in all "
          f"(12 B x {params} parameters = {mib(12 * params)})")
    print(f"   {'rank':>4} {'file':>12} {'share':>6} {'host peak':>10} {'state written':>14} {'state + buffer':>15}")
    worst_share = 0.0
    for r, b in enumerate(last["checkpoint_bytes_per_rank"]):
        peak = last["checkpoint_host_peak_bytes_per_rank"][r]
        state = last["checkpoint_state_bytes_per_rank"][r]
        worst_share = max(worst_share, b / total)
        print(f"   {r:>4} {mib(b):>12} {100 * b / total:>5.1f}% {mib(peak):>10} {mib(state):>14} {mib(state + buffer):>15}")
        assert peak <= state + buffer, f"rank {r}: the save's host peak {peak} is above its state and the buffer"
    assert worst_share <= 0.25, f"a file holds {100 * worst_share:.1f}% of the checkpoint"
    if args.old_tidal:
        old_base = [s for s in base if not s.startswith("checkpoint.")]
        _, _, old_plain = train(args.old_tidal, 8, old_base, f"{d}/old_plain.jsonl", f"{d}/old_plain.log")
        _, _, old_saved = train(args.old_tidal, 8, old_base + [f"checkpoint.dir={d}/ck_old"], f"{d}/old.jsonl",
                                f"{d}/old.log")
        before = old_plain["peak_bytes"]["host_per_rank"][0]
        after = old_saved["peak_bytes"]["host_per_rank"][0]
        print(f"   the old format (whole tensors gathered on rank 0, {args.old_tidal}): rank 0's host peak "
              f"{mib(after)} with its save against {mib(before)} without, {mib(after - before)} for the save; "
              f"the other ranks' {mib(max(old_saved['peak_bytes']['host_per_rank'][1:]))} at most")
    same = [s for s in plain if plain[s] != background.get(s)]
    print(f"   losses of the {len(plain)} steps with background saves against none: "
          f"{'bitwise equal' if not same else f'{len(same)} differ'}")
    assert not same, f"steps {same} differ"
    # The end of the run waits for its last save whole: the stall of saves during training.
    during = [s["checkpoint_stall_s"] for s in saves_async if s["checkpoint_step"] < args.steps]
    sync = [s["checkpoint_stall_s"] for s in saves_sync if s["checkpoint_step"] < args.steps]
    ratio = statistics.median(during) / statistics.median(sync)
    print(f"   stall per save (the slowest rank; saves before the last step): background "
          f"{', '.join(f'{x:.3f}' for x in during)} s, median {statistics.median(during):.3f} s; synchronous "
          f"{', '.join(f'{x:.3f}' for x in sync)} s, median {statistics.median(sync):.3f} s: {100 * ratio:.1f}%")
    writes = ", ".join(f"{s['checkpoint_write_s']:.3f}" for s in saves_async)
    print(f"   the write in the background took {writes} s")
    assert ratio <= 0.2, f"the background saves stall {100 * ratio:.1f}% of the synchronous ones"


def dd_rate(d):
    out = subprocess.run(["dd", "if=/dev/zero", f"of={d}/dd.bin", "bs=8M", "count=128", "conv=fsync"],
                         capture_output=True, text=True).stderr
    os.remove(f"{d}/dd.bin")
    line = out.strip().splitlines()[-1]
    return line, float(line.split(",")[0].split()[0]) / float(line.split(",")[-2].split()[0])


def calibrate(args, d, when):
    """The hardware file of each world size: `mpirun -np N tidal calibrate` now (or reused)."""
    files = {}
    os.makedirs(args.hardware_dir, exist_ok=True)
    for ranks in sorted({max(2, r) for _, r, _ in LAYOUTS}):
        path = os.path.join(args.hardware_dir, f"calibrated-{ranks}-{when}.toml")
        if not (args.reuse_hardware and os.path.exists(path)):
            subprocess.run(MPIRUN + ["-np", str(ranks), args.tidal, "calibrate", "--out", path, "--disk-dir", d],
                           check=True, stdout=subprocess.DEVNULL)
        files[ranks] = path
        disk = [line.strip() for line in open(path) if line.startswith("write =")]
        print(f"   tidal calibrate, {ranks} ranks, {when}: [disk] {' '.join(disk)}")
    return files


def predicted(args, ranks, run, hardware):
    """The cost model's save on one calibration: (write s, sync stall s, async stall s)."""
    plan = subprocess.run([args.tidal, "plan", "--world", str(ranks), "--configured", "--hardware",
                           hardware[max(2, ranks)], "--json"] + sets(run), capture_output=True, text=True, check=True)
    c = json.loads(plan.stdout.splitlines()[0])["checkpoint"]
    return c["write_s"], c["sync_stall_s"], c["async_stall_s"]


def part2(args, d):
    line, rate = dd_rate(d)
    print(f"\n2. the disk under {d}: dd of 1 GiB with fsync: {line} ({rate / 1e9:.3f} GB/s)")
    # The machine's disk drifts (a VM's write cache): the layouts run between two calibrations, and
    # each prediction is the geometric mean of the two (as bench/cost_model_time.py brackets).
    before = calibrate(args, d, "before")
    runs = []
    for name, ranks, settings in LAYOUTS:
        if args.layout and name not in args.layout:
            continue
        config = GPT + settings + [f"train.steps={args.steps}", f"checkpoint.every={args.every}", "checkpoint.keep=1"]
        for mode in ("sync", "async"):
            run = config + [f"checkpoint.dir={d}/{name}_{mode}", f"checkpoint.async={'true' if mode == 'async' else 'false'}"]
            _, saves, summary = train(args.tidal, ranks, run, f"{d}/{name}_{mode}.jsonl", f"{d}/{name}_{mode}.log")
            runs.append((name, ranks, mode, run, saves, summary["step_times"]))
    after = calibrate(args, d, "after")
    line, rate = dd_rate(d)
    print(f"   dd again: {line} ({rate / 1e9:.3f} GB/s)")
    print(f"   {'layout':<32} {'mode':<6} {'write s':>8} {'pred.':>7} {'ratio':>6} {'stall s':>8} {'pred.':>7} "
          f"{'ratio':>6}  per-rank write MB/s; the stall's parts (snapshot / writer / commit ms); the step after "
          f"a save / the others (past the first two)")
    for name, ranks, mode, run, saves, times in runs:
        a, b = predicted(args, ranks, run, before), predicted(args, ranks, run, after)
        pw, ps_sync, ps_async = (math.sqrt(x * y) for x, y in zip(a, b))
        ps = ps_sync if mode == "sync" else ps_async
        during = [s for s in saves if s["checkpoint_step"] < args.steps]
        write = statistics.median(s["checkpoint_write_s"] for s in during)
        stall = statistics.median(s["checkpoint_stall_s"] for s in during)
        rates = [b / w / 1e6 for s in during for b, w in zip(s["checkpoint_bytes_per_rank"],
                                                              s["checkpoint_write_s_per_rank"]) if b > 0]
        parts = " / ".join(f"{1000 * statistics.median(s[k] for s in during):.1f}" for k in
                           ("checkpoint_snapshot_s", "checkpoint_writer_wait_s", "checkpoint_commit_s"))
        # What a save costs beside its stall: the step it runs beside (its writer shares the cores).
        next_steps = {s["checkpoint_step"] + 1 for s in during}
        beside = statistics.median(times[k] for k in next_steps if k in times)
        others = statistics.median(t for k, t in times.items() if k > 2 and k not in next_steps)
        print(f"   {name:<32} {mode:<6} {write:>8.3f} {pw:>7.3f} {pw / write:>6.2f} {stall:>8.3f} {ps:>7.3f} "
              f"{ps / stall if stall > 0 else float('nan'):>6.2f}  {min(rates):.0f}-{max(rates):.0f}; {parts}; "
              f"{beside:.3f} / {others:.3f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--steps", type=int, default=21)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--old-tidal", default="")
    p.add_argument("--hardware-dir", default="")
    p.add_argument("--reuse-hardware", action="store_true")
    p.add_argument("--only", choices=["1", "2"])
    p.add_argument("--layout", action="append", help="part 2: only these layouts")
    p.add_argument("--dir", default="", help="where checkpoints go (default: a temporary directory here)")
    args = p.parse_args()
    args.tidal = os.path.join(args.build, "src", "tidal")
    with tempfile.TemporaryDirectory(dir=args.dir or None) as d:
        args.hardware_dir = args.hardware_dir or d
        print(open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip("\t: ") +
              f", {os.cpu_count()} cores; checkpoints under {d}")
        if args.only != "2":
            part1(args, d)
        if args.only != "1":
            part2(args, d)


if __name__ == "__main__":
    main()
