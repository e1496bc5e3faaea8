#!/usr/bin/env bash
# Kill at any moment: TRIALS times per layout (default 20; three layouts), a run saving a
# checkpoint every 5 steps in the background (checkpoint.async = true) is sent SIGKILL at a random
# moment - its whole session (mpirun and every rank) in even trials, one rank alone (a random one;
# mpirun then ends the rest) in odd ones - then resumed with --resume to the end. Each resume must
# load the last complete checkpoint (`latest` names a step directory whose every block matches its
# checksum - `tidal checkpoint inspect` reads them all - or none was written yet and the run starts
# over), and the losses of the resumed steps must equal the uninterrupted run's bitwise. A trial
# whose kill left a save's temporary directory behind was killed while a save was being written.
# Layouts: data 2 at zero.stage 3, pipeline 2, and one process with chunks offloaded under a
# device cap. Last, per layout, a byte flipped in a rank's file of the last checkpoint: the
# resume stops with exit 2 naming the file.
# ctest's mpi.kill_trials runs 2 trials per layout; 17 per layout (51 in all, a few minutes here)
# by hand.
# usage: scripts/kill_trials.sh [path/to/tidal] [TRIALS]
set -euo pipefail
cd "$(dirname "$0")/.."
tidal=$(realpath "${1:-build/src/tidal}")
trials=${2:-20}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
common=(--set train.steps=600 --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=2 --set model.seq_len=32
        --set train.batch_size=4 --set train.eval_every=0 --set checkpoint.every=5 --set checkpoint.keep=2
        --set checkpoint.async=true)
declare -A launch=([data2_zero3]="${mpirun[*]} -np 2" [pipeline2]="${mpirun[*]} -np 2" [offload]="")
declare -A layout=([data2_zero3]="--set parallel.data=2 --set zero.stage=3"
                   [pipeline2]="--set parallel.pipeline=2 --set train.micro_batch_size=2"
                   [offload]="--set memory.offload=chunk --set memory.device_limit=4MiB --set memory.chunk_size=20000")
summary=()
for name in data2_zero3 pipeline2 offload; do
  read -r -a run <<< "${launch[$name]}"
  read -r -a args <<< "${layout[$name]}"
  start=$(date +%s.%N)
  "${run[@]}" "$tidal" train "${common[@]}" "${args[@]}" --metrics "$dir/$name-whole.jsonl" > /dev/null 2>&1
  duration=$(/usr/bin/python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
  before=0 resumed=0 finished=0 mid_save=0 one_rank=0
  for ((t = 0; t < trials; ++t)); do
    ck="$dir/$name-ck-$t"
    setsid "${run[@]}" "$tidal" train "${common[@]}" "${args[@]}" --set checkpoint.dir="$ck" > /dev/null 2>&1 &
    pid=$!
    # A moment anywhere in the run: start-up, a step, a checkpoint being written.
    sleep "$(/usr/bin/python3 -c "import random, sys; print(round(random.uniform(0.02, 1.0) * float(sys.argv[1]), 3))" "$duration")"
    ranks=$(pgrep -s "$pid" -x tidal || true)
    if ((t % 2 == 1)) && [ -n "$ranks" ] && [ ${#run[@]} -gt 0 ]; then
      # One rank alone: the launcher sees it die and ends the others.
      victim=$(shuf -n 1 <<< "$ranks")
      kill -KILL "$victim" 2> /dev/null || true
      one_rank=$((one_rank + 1))
    else
      # Every process of the session: mpirun and the ranks (each in a process group of its own).
      pkill -KILL -s "$pid" 2> /dev/null || true
    fi
    wait "$pid" 2> /dev/null || true
    while pgrep -s "$pid" > /dev/null; do sleep 0.05; done
    compgen -G "$ck/step-*.tmp-*" > /dev/null && mid_save=$((mid_save + 1))
    if [ ! -f "$ck/latest" ]; then
      before=$((before + 1))  # killed before the first checkpoint: nothing to resume
      rm -rf "$ck"
      continue
    fi
    if [ "$(cat "$ck/latest")" = step-00000600 ]; then
      finished=$((finished + 1))  # the run ended before the kill came
      rm -rf "$ck"
      continue
    fi
    "$tidal" checkpoint inspect "$ck" > "$dir/$name-inspect-$t.log" 2>&1 ||
      { cat "$dir/$name-inspect-$t.log"; echo "FAIL: $name trial $t: latest is not a complete checkpoint"; exit 1; }
    "${run[@]}" "$tidal" train "${common[@]}" "${args[@]}" --set checkpoint.dir="$ck" --resume "$ck" \
      --metrics "$dir/$name-resumed-$t.jsonl" > "$dir/$name-resumed-$t.log" 2>&1 ||
      { cat "$dir/$name-resumed-$t.log"; echo "FAIL: $name trial $t: the resume failed"; exit 1; }
    resumed=$((resumed + 1))
    /usr/bin/python3 - "$dir/$name-whole.jsonl" "$dir/$name-resumed-$t.jsonl" "$name trial $t" <<'PY'
import json, sys
whole, resumed, what = sys.argv[1:]
steps = lambda p: {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and not r.get("summary")}
w, r = steps(whole), steps(resumed)
assert r and max(r) == 600, f"{what}: resumed steps {sorted(r)}"
assert all(r[s] == w[s] for s in r), f"{what}: resumed losses differ from the uninterrupted run's"
PY
    rm -rf "$ck"
  done
  # A checkpoint damaged: a byte flipped two thirds into one rank's file (in some block's data).
  ck="$dir/$name-flip"
  "${run[@]}" "$tidal" train "${common[@]}" "${args[@]}" --set checkpoint.dir="$ck" --stop-after 10 > /dev/null 2>&1
  file=$(ls "$ck/$(cat "$ck/latest")"/rank-*.safetensors | shuf -n 1)
  /usr/bin/python3 - "$file" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(os.path.getsize(sys.argv[1]) * 2 // 3)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
PY
  set +e
  "${run[@]}" "$tidal" train "${common[@]}" "${args[@]}" --resume "$ck" > "$dir/$name-flipped.log" 2>&1
  rc=$?
  set -e
  { grep -q "$(basename "$file")" "$dir/$name-flipped.log" && grep -q "does not match its checksum" "$dir/$name-flipped.log"; } ||
    { cat "$dir/$name-flipped.log"; echo "FAIL: $name: a flipped byte in $file was not reported by name"; exit 1; }
  [ $rc -eq 2 ] || { cat "$dir/$name-flipped.log"; echo "FAIL: $name: a damaged checkpoint exits $rc (want 2)"; exit 1; }
  summary+=("$name: $trials kills ($one_rank of one rank alone, $mid_save while a save was being written), $resumed resumed from their last checkpoint with the uninterrupted losses bitwise, $before before the first checkpoint, $finished after the end; a byte flipped in $(basename "$file") stops the resume with exit 2 naming it")
done
printf '%s\n' "${summary[@]}"
echo "PASS: every kill resumed from its last complete checkpoint"
