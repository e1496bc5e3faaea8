#!/usr/bin/env bash
# A long run that must stay flat (issue: reliability): a small GPT trains STEPS steps (default
# 20,000) with a checkpoint every 500 and checkpoint.keep = 2, while this script samples the
# process's open file descriptors and the checkpoint directories every 0.2 s. It passes when,
# after the warm-up (the first 1,000 steps), the resident memory of the last 1,000 steps is within
# 1% of that of steps 1,001-2,000, every allocator's peak (host, activations) is what it was at
# step 1,000, the steady count of open descriptors (sampled from the first step on) does not grow,
# and the checkpoint directory never holds more than keep + 1 step directories. Prints the memory curve (mean resident MiB per 1,000 steps).
# Not in the suite: about a minute here. usage: scripts/soak.sh [path/to/tidal] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
tidal=${1:-build/src/tidal}
steps=${2:-20000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tidal" train --set train.steps="$steps" --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=2 \
  --set model.seq_len=32 --set train.batch_size=4 --set train.eval_every=2000 --set train.eval_batches=1 \
  --set train.log_every=2000 --set checkpoint.dir="$dir/ck" --set checkpoint.every=500 --set checkpoint.keep=2 \
  --metrics "$dir/metrics.jsonl" > "$dir/log" 2>&1 &
pid=$!
: > "$dir/samples"
while kill -0 "$pid" 2> /dev/null; do
  fds=$(ls "/proc/$pid/fd" 2> /dev/null | wc -l) || fds=0
  ckpts=$(ls -d "$dir"/ck/step-* 2> /dev/null | wc -l) || ckpts=0
  # From the first step's record on: before it the run has not opened its metrics file yet (one
  # descriptor fewer, which a fast start-up put in the first tenth's minimum).
  [ "$fds" -gt 0 ] && [ -s "$dir/metrics.jsonl" ] && echo "$fds $ckpts" >> "$dir/samples"
  sleep 0.2
done
wait "$pid" || { cat "$dir/log"; echo "FAIL: the run failed"; exit 1; }
/usr/bin/python3 - "$dir" "$steps" <<'PY'
import json, sys
d, steps = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
recs = {r["step"]: r for r in rows if "loss" in r and not r.get("summary")}
assert len(recs) == steps, f"{len(recs)} step records of {steps}"
mib = lambda b: b / 2**20
curve = [sum(recs[s]["resident_bytes"] for s in range(k + 1, k + 1001)) / 1000 for k in range(0, steps, 1000)]
print("resident MiB per 1,000 steps:", " ".join(f"{mib(c):.1f}" for c in curve))
first, last = curve[1], curve[-1]
growth = (last - first) / first
print(f"steps 1,001-2,000: {mib(first):.2f} MiB; last 1,000: {mib(last):.2f} MiB; growth {100 * growth:+.2f}%")
assert growth < 0.01, "resident memory grew by 1% or more after the warm-up"
for tier in ("host", "activations"):
    at, end = recs[1000]["peak_bytes"][tier], recs[steps]["peak_bytes"][tier]
    print(f"{tier} allocator peak: {at} bytes at step 1,000, {end} at step {steps}")
    assert end == at, f"the {tier} allocator's peak grew after the warm-up"
samples = [tuple(map(int, l.split())) for l in open(f"{d}/samples")]
fds = [f for f, _ in samples]
n = max(1, len(fds) // 10)
# The steady count is the least of a stretch (a checkpoint being written holds one or two more).
print(f"open descriptors: {len(fds)} samples, steady {min(fds[:n])} in the first tenth and {min(fds[-n:])} in the "
      f"last, at most {max(fds)}; checkpoint directories at most {max(c for _, c in samples)}")
assert min(fds[-n:]) <= min(fds[:n]), "open file descriptors grew"
assert max(c for _, c in samples) <= 3, "more than keep + 1 checkpoint directories"
print(f"PASS: {steps} steps flat after the warm-up")
PY
