# expect_error <message> <ranks> <tidal train arguments...>: the run under mpirun exits with code 2
# and prints <message> exactly once (every rank meets the error; rank 0 says it). Needs $tidal,
# $dir and the MPIRUN array of the sourcing script.
expect_error() {
  local message=$1 np=$2; shift 2
  set +e
  "${MPIRUN[@]}" -np "$np" "$tidal" train "$@" > "$dir/err.log" 2>&1
  local rc=$?
  set -e
  [ $rc -eq 2 ] || { cat "$dir/err.log"; echo "FAIL: exit $rc for '$*', expected 2"; exit 1; }
  local n
  n=$(grep -cF "$message" "$dir/err.log" || true)
  [ "$n" -eq 1 ] || { cat "$dir/err.log"; echo "FAIL: '$message' was printed $n times"; exit 1; }
}
