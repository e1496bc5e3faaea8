#!/usr/bin/env bash
# A run made to diverge (train.lr = 1e8, warm-up 1 step, clipping off) in fp32 (tensors), and in
# bf16 (chunks, ZeRO-1) at train.lr = 1e30, with a checkpoint every step: it stops with exit 3 at
# the first step whose loss or gradient is not finite, with one message naming that step and what
# was not finite (the loss, or the parameter whose gradient is not), that step wrote no
# checkpoint, `latest` names the step before it, whose weights are all finite and which loads
# again. Under train.on_nonfinite = "skip" the non-finite steps are dropped and
# train.max_skipped_steps = 3 in a row end the run (exit 3).
# The learning rates: at 1e4 and 1e5 the fp32 loss grows to 1e10-1e12 over 30 steps and, on MKL's
# and OpenBLAS's sgemm, stays finite (oneDNN's overflowed at 1e4, by step 21); 1e6 overflows at
# step 2 on all three libraries (measured), 1e8 keeps a margin. bf16 at 1e4 grows to about 7e9.
# usage: check_nonfinite.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
diverge=(--set train.steps=30 --set train.lr=1e8 --set train.min_lr=1e8 --set train.warmup_steps=1
         --set train.grad_clip=0 --set checkpoint.every=1 --set checkpoint.keep=30 --set train.eval_every=0)
for precision in fp32 bf16; do
  ck="$dir/ck-$precision"
  extra=()
  [ "$precision" = bf16 ] && extra=(--set zero.stage=1 --set train.lr=1e30 --set train.min_lr=1e30)
  set +e
  "$tidal" train "${diverge[@]}" "${extra[@]}" --set train.precision=$precision --set checkpoint.dir="$ck" \
    --metrics "$dir/$precision.jsonl" > "$dir/$precision.out" 2> "$dir/$precision.err"
  rc=$?
  set -e
  [ $rc -eq 3 ] || { cat "$dir/$precision.err"; echo "FAIL: $precision: exit $rc (want 3)"; exit 1; }
  grep -q "^tidal: stopped: step [0-9]*: \(the loss is \|the gradient of .* is not finite\|the gradient norm is \)" \
    "$dir/$precision.err" ||
    { cat "$dir/$precision.err"; echo "FAIL: $precision: the message does not name the step and the quantity"; exit 1; }
  [ "$(wc -l < "$dir/$precision.err")" -eq 1 ] || { cat "$dir/$precision.err"; echo "FAIL: one line"; exit 1; }
  /usr/bin/python3 - "$dir/$precision.err" "$ck" "$precision" <<'PY'
import json, math, os, re, struct, sys
err, ck, precision = sys.argv[1:]
step = int(re.search(r"step (\d+):", open(err).read()).group(1))
latest = open(os.path.join(ck, "latest")).read().strip()
steps = sorted(d for d in os.listdir(ck) if d.startswith("step-"))
assert latest == f"step-{step - 1:08d}", (latest, step)
assert steps[-1] == latest, f"a checkpoint of the failing step was written: {steps}"
tensors = 0
for file in sorted(f for f in os.listdir(os.path.join(ck, latest)) if f.endswith(".safetensors")):
    blob = open(os.path.join(ck, latest, file), "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    for name, t in header.items():
        begin, end = t["data_offsets"]
        values = struct.unpack(f"<{(end - begin) // 4}f", blob[8 + n + begin:8 + n + end])
        assert all(math.isfinite(v) for v in values), f"{latest}/{file}: {name} holds non-finite values"
        tensors += 1
assert tensors > 0, f"{latest} holds no tensors"
print(f"{precision}: stopped at step {step} with exit 3; latest = {latest}, {tensors} tensors all finite")
PY
  # The last good checkpoint loads (resumed at its own step: no step runs, and it is written again).
  latest=$(cat "$ck/latest")
  "$tidal" train "${diverge[@]}" "${extra[@]}" --set train.precision=$precision --resume "$ck" \
    --stop-after "$((10#${latest#step-}))" --set checkpoint.dir="$dir/again-$precision" > /dev/null
done
set +e
"$tidal" train "${diverge[@]}" --set train.on_nonfinite=skip --set train.max_skipped_steps=3 \
  --set checkpoint.dir="$dir/skip" > "$dir/skip.out" 2> "$dir/skip.err"
rc=$?
set -e
[ $rc -eq 3 ] || { cat "$dir/skip.err"; echo "FAIL: skip: exit $rc (want 3)"; exit 1; }
grep -q "3 steps in a row skipped (train.max_skipped_steps = 3)" "$dir/skip.err" ||
  { cat "$dir/skip.err"; echo "FAIL: skip: no max_skipped_steps message"; exit 1; }
[ "$(grep -c 'step skipped (train.on_nonfinite = "skip")' "$dir/skip.out")" -eq 3 ] ||
  { cat "$dir/skip.out"; echo "FAIL: skip: the three dropped steps are not each reported"; exit 1; }
echo "PASS: diverged runs stop with exit 3 at the first non-finite step, latest the last good checkpoint; skip drops steps"
