#!/usr/bin/env bash
# A rank killed with SIGKILL in the middle of data-parallel training ends every other rank
# within 60 s with an error naming the lost rank:
#   1. under plain mpirun, the launcher ends the job and names the rank;
#   2. under mpirun --enable-recovery (which, like some srun setups, leaves the survivors
#      running), tidal's watchdog does.
# usage: check_rank_loss.sh path/to/tidal <mpirun command...>
set -u
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; tail -n 30 "$dir"/*.log; exit 1; }

run() {  # run <name> <extra mpirun args...>
  local name=$1; shift
  rm -f "$dir"/pid.*
  local start=$SECONDS
  # Each rank records its pid, then becomes tidal (a long run: it must not finish by itself).
  timeout 120 "$@" -np 4 bash -c 'echo $$ > '"$dir"'/pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' "$tidal" train \
    --set parallel.data=4 --set train.steps=100000 --set train.batch_size=8 --set parallel.timeout_s=10 \
    --set train.log_every=1 > "$dir/$name.log" 2>&1 &
  local job=$!
  # Kill rank 1 once training is under way.
  for _ in $(seq 1 600); do
    grep -q "^step" "$dir/$name.log" 2>/dev/null && [ -f "$dir/pid.1" ] && break
    sleep 0.1
  done
  grep -q "^step" "$dir/$name.log" || fail "$name: training never started"
  local killed_at=$SECONDS
  kill -KILL "$(cat "$dir/pid.1")"
  wait $job
  local rc=$? took=$((SECONDS - killed_at))
  echo "$name: job ended $took s after SIGKILL of rank 1 (exit $rc)"
  [ $rc -ne 124 ] || fail "$name: still running 120 s after start (hang)"
  [ $took -le 60 ] || fail "$name: the survivors took $took s (> 60 s)"
  # The survivors must be gone too (a zombie awaiting its reaper counts as gone).
  for r in 0 2 3; do
    local pid state; pid=$(cat "$dir/pid.$r")
    while state=$(ps -o stat= -p "$pid" 2>/dev/null) && [ "${state:0:1}" != Z ]; do
      [ $((SECONDS - killed_at)) -le 60 ] || fail "$name: rank $r (pid $pid) still alive 60 s after the kill"
      sleep 0.2
    done
  done
  echo "$name: ranks 0, 2, 3 ended $((SECONDS - killed_at)) s after the kill"
}

run launcher "$@"
grep -q "process rank 1 .* exited on signal 9" "$dir/launcher.log" || fail "launcher: the lost rank is not named"
run watchdog "$@" --enable-recovery
grep -q "world rank 1): no answer (the process is dead or hung)" "$dir/watchdog.log" || fail "watchdog: rank 1 not named"
grep -m1 -A3 "watchdog on world rank" "$dir/watchdog.log"
echo PASS
