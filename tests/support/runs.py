"""Compare the metrics files (JSON lines) of tidal runs with a reference run of the same seed.

Used by the multi-rank scripts under tests/mpi: each parallel layout must give the single
process's per-step losses, eval losses and final eval loss within a relative tolerance.
"""
import json
import os
import struct


def read(directory, name):
    """(step -> loss, step -> eval loss, the last summary record) of <directory>/<name>.jsonl."""
    rows = [json.loads(line) for line in open(os.path.join(directory, name + ".jsonl"))]
    steps = {r["step"]: r["loss"] for r in rows if "loss" in r and not r.get("summary")}
    evals = {r["step"]: r["eval_loss"] for r in rows if "eval_loss" in r}
    summary = [r for r in rows if r.get("summary")][-1]
    return steps, evals, summary


def compare(directory, name, reference, tolerance, all_steps=False):
    """Prints and checks the worst relative differences of run `name` against `reference`.

    The run may cover part of the reference's steps (a resumed run) unless all_steps. Returns the
    worst step-loss difference and the run's summary record.
    """
    ref, ref_evals, ref_summary = read(directory, reference)
    steps, evals, summary = read(directory, name)
    assert steps and set(steps) <= set(ref), f"{name}: steps {sorted(steps)}"
    assert not all_steps or sorted(steps) == sorted(ref), f"{name}: steps {sorted(steps)}"
    worst = max(abs(steps[s] - ref[s]) / abs(ref[s]) for s in steps)
    worst_eval = max([abs(evals[s] - ref_evals[s]) / abs(ref_evals[s]) for s in evals] + [0.0])
    final = abs(summary["final_loss"] - ref_summary["final_loss"]) / ref_summary["final_loss"]
    layout = summary["layout"]
    shape = ", ".join(f"{k} {layout[k]}" for k in ("world_size", "data", "pipeline", "tensor", "sequence") if k in layout)
    if layout.get("tensor", 1) > 1:
        shape += f" ({layout['tensor_mode']})"
    print(f"{name:>20}: {shape}: steps {min(steps)}-{max(steps)}, worst step-loss rel. diff {worst:.2e}, "
          f"eval {worst_eval:.2e}, final eval {final:.2e}")
    assert worst <= tolerance and worst_eval <= tolerance and final <= tolerance, (
        f"{name} differs from {reference} by more than {tolerance}")
    assert summary["parameters"] == ref_summary["parameters"], f"{name}: parameter count"
    return worst, summary


def device_cap(directory, name, fraction):
    """`fraction` of the largest rank's model data (bytes) in run `name`'s summary: a memory.device_limit
    under which chunks must move."""
    rows = [json.loads(line) for line in open(os.path.join(directory, name + ".jsonl"))]
    return int(max(rows[-1]["model_data"]["model_data_bytes_per_rank"]) * fraction)


def tensors(path):
    """name -> (dtype, shape, raw bytes) of a safetensors file: what a bitwise comparison needs."""
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


if __name__ == "__main__":
    import sys
    # runs.py device-cap DIR NAME FRACTION: prints device_cap's bytes (for the scripts under tests/mpi).
    assert len(sys.argv) == 5 and sys.argv[1] == "device-cap", sys.argv
    print(device_cap(sys.argv[2], sys.argv[3], float(sys.argv[4])))
