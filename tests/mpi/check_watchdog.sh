#!/usr/bin/env bash
# The watchdog ends a job whose collective cannot complete: a rank in the wrong operation
# (mismatch) and a dead rank (run with --enable-recovery so that mpirun itself does not kill
# the survivors). Each must end within 60 s with a message naming the operation, the group and
# the rank that did not arrive.
# usage: check_watchdog.sh <watchdog_probe binary> <mpirun command...>
set -u
probe=$1; shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"/*.log; exit 1; }

run() {  # run <name> <mode> <must fail: yes|no> <extra mpirun args...>
  local name=$1 mode=$2 must_fail=$3; shift 3
  local start=$SECONDS
  timeout 90 "$@" -np 4 "$probe" "$mode" >"$out/$name.log" 2>&1
  local rc=$? took=$((SECONDS - start))
  echo "$name: exit $rc after ${took} s"
  # mpirun --enable-recovery reports 0 even after MPI_Abort: there the message is the evidence.
  [ $must_fail = no ] || [ $rc -ne 0 ] || fail "$name: the job succeeded"
  [ $rc -ne 124 ] || fail "$name: still running after 90 s (hang)"
  [ $took -le 60 ] || fail "$name: took ${took} s (> 60 s)"
  grep -q "the watchdog did not fire" "$out/$name.log" && fail "$name: the faulty step completed"
  grep -q "watchdog on world rank" "$out/$name.log" || fail "$name: no watchdog message"
  grep -q "all_reduce #2 on group 'world'" "$out/$name.log" || fail "$name: message does not name the operation and group"
  return 0
}

run mismatch mismatch yes "$@"
grep -q "rank 3: it is in recv from 0" "$out/mismatch.log" || fail "mismatch: rank 3's recv not named"
run dead dead no "$@" --enable-recovery
grep -q "rank 1: no answer (the process is dead or hung)" "$out/dead.log" || fail "dead: rank 1 not named as dead"
sed -n '/watchdog on world rank/,/parallel.timeout_s/p' "$out/dead.log" | head -8
echo "PASS"
