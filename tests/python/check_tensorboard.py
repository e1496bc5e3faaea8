#!/usr/bin/env python3
"""Checks a run's TensorBoard events against its metrics file, reading the events with TensorBoard's
own reader (EventAccumulator), so that a file TensorBoard cannot parse fails here.

usage: check_tensorboard.py <metrics.jsonl> <event dir>

Every JSON line with a "step" that is not the summary record is flattened as TensorBoardWriter::scalars
does (nested keys joined with "/", array elements as "<key>/<index>", booleans as 0/1, strings and null
skipped, the top-level key "step" skipped); each of its scalars must be a tag in the event dir with an
event at that step whose value equals the number rounded to float32 (simple_value is a float).
Exits 0 with a PASS line, 1 with the mismatches.
"""
import json
import math
import os
import struct
import sys

REL_TOL = 1e-6
ABS_TOL = 1e-30


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def flatten(node, tag, out):
    if isinstance(node, bool):  # before int: bool is an int in Python
        out.append((tag, 1.0 if node else 0.0))
    elif isinstance(node, (int, float)):
        out.append((tag, float(node)))
    elif isinstance(node, dict):
        for key, child in node.items():
            flatten(child, f"{tag}/{key}", out)
    elif isinstance(node, list):
        for i, child in enumerate(node):
            flatten(child, f"{tag}/{i}", out)
    # str and None carry no scalar


def record_scalars(record):
    out = []
    for key, child in record.items():
        if key != "step":
            flatten(child, key, out)
    return out


def to_float32(x):
    """x rounded to float32 as the writer stores it; beyond float32's range, +-inf."""
    if math.isnan(x) or math.isinf(x):
        return x
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def same(expected, got):
    if math.isnan(expected) or math.isnan(got):
        return math.isnan(expected) and math.isnan(got)
    if math.isinf(expected) or math.isinf(got):
        return expected == got
    return abs(got - expected) <= max(ABS_TOL, REL_TOL * abs(expected))


def load_events(event_dir):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator, SCALARS
    except ImportError as e:
        fail(f"cannot import tensorboard ({e}): run this with a python that has it (pip install tensorboard)")
    if not os.path.isdir(event_dir):
        fail(f"event dir '{event_dir}' does not exist")
    files = sorted(f for f in os.listdir(event_dir) if "tfevents" in f)
    if not files:
        fail(f"no events.out.tfevents.* file in '{event_dir}'")
    acc = EventAccumulator(event_dir, size_guidance={SCALARS: 0})  # 0 = keep every event
    acc.Reload()
    events = {}  # tag -> step -> [values]
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            events.setdefault(tag, {}).setdefault(ev.step, []).append(ev.value)
    return files, events


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        sys.exit(2)
    metrics_path, event_dir = sys.argv[1], sys.argv[2]
    files, events = load_events(event_dir)

    lines = scalars = 0
    problems = []
    with open(metrics_path) as f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            record = json.loads(text)
            if not isinstance(record, dict) or "step" not in record or record.get("summary"):
                continue
            step = int(record["step"])
            lines += 1
            for tag, value in record_scalars(record):
                scalars += 1
                expected = to_float32(value)
                got = events.get(tag, {}).get(step)
                if got is None:
                    problems.append(f"line {number}: tag '{tag}' has no event at step {step}"
                                    + ("" if tag in events else " (the tag is missing altogether)"))
                elif not any(same(expected, g) for g in got):
                    problems.append(f"line {number}: tag '{tag}' at step {step} is {got}, expected {expected!r} "
                                    f"(float32 of {value!r})")
    if lines == 0:
        fail(f"'{metrics_path}' has no step record to check")
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        fail(f"{len(problems)} of {scalars} scalars from '{metrics_path}' do not match the events in "
             f"'{event_dir}':\n  {shown}{more}")
    n_events = sum(len(v) for steps in events.values() for v in steps.values())
    print(f"PASS: {scalars} scalars from {lines} metrics lines found in {len(events)} TensorBoard tags "
          f"({n_events} scalar events, {len(files)} event file(s)) in {event_dir}")


if __name__ == "__main__":
    main()
