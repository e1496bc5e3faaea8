#!/usr/bin/env bash
# A checkpoint written into a full filesystem (issue 32): checkpoint.dir on a tmpfs with room for
# one checkpoint and a half. The step-5 checkpoint is written; the step-10 one runs out of space,
# and the run ends with exit 2 and a message that names the step, the cause and the last complete
# checkpoint; the half-written directory is gone, `latest` still names step 5, and a run resumed
# from it trains on to the uninterrupted run's losses bitwise.
# Exits 77 (ctest: skipped) where this process may not mount a tmpfs (it needs root).
# usage: check_checkpoint_full_disk.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
mnt=$dir/small
mkdir -p "$mnt"
small=(--set model.n_layer=2 --set model.n_embd=64 --set model.n_head=2 --set model.seq_len=32 --set train.batch_size=4
       --set train.eval_every=0 --set train.steps=10 --set checkpoint.every=5 --set checkpoint.keep=2)
"$tidal" train "${small[@]}" --set checkpoint.dir="$dir/whole" --metrics "$dir/whole.jsonl" > /dev/null
one=$(du -sb "$dir/whole/step-00000005" | cut -f1)
if ! mount -t tmpfs -o size=$((one * 3 / 2 / 4096 * 4096)) tmpfs "$mnt" 2> /dev/null; then
  rm -rf "$dir"
  echo "skipped: this process may not mount a tmpfs (needs root or CAP_SYS_ADMIN)"
  exit 77
fi
trap 'umount "$mnt" 2> /dev/null; rm -rf "$dir"' EXIT
echo "a checkpoint takes $one bytes; the tmpfs holds $(df -B1 --output=size "$mnt" | tail -1 | tr -d ' ')"
set +e
err=$("$tidal" train "${small[@]}" --set checkpoint.dir="$mnt" 2>&1 > /dev/null)
rc=$?
set -e
echo "into the full filesystem: exit $rc: $err"
[[ $rc -eq 2 ]] || { echo "FAIL: want exit 2"; exit 1; }
for want in "step 10 was not written" "No space left on device" "'step-00000005', stays as 'latest'" "checkpoint.dir"; do
  [[ $err == *"$want"* ]] || { echo "FAIL: the message does not say \"$want\""; exit 1; }
done
[[ $(cat "$mnt/latest") == step-00000005 ]] || { echo "FAIL: latest names $(cat "$mnt/latest")"; exit 1; }
left=$(ls "$mnt")
[[ $left == $'latest\nstep-00000005' ]] || { echo "FAIL: the directory holds: $left"; exit 1; }
"$tidal" train "${small[@]}" --resume "$mnt" --set checkpoint.dir="$dir/resumed" --metrics "$dir/resumed.jsonl" > /dev/null
/usr/bin/python3 - "$dir/whole.jsonl" "$dir/resumed.jsonl" <<'PY'
import json, sys
steps = lambda p: {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and not r.get("summary")}
whole, resumed = steps(sys.argv[1]), steps(sys.argv[2])
assert sorted(resumed) == list(range(6, 11)), f"resumed steps {sorted(resumed)}"
assert all(resumed[s] == whole[s] for s in resumed), "the resumed losses differ from the uninterrupted run's"
print("resumed from step 5: steps 6-10 equal the uninterrupted run's bitwise")
PY
echo PASS
