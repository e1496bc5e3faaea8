# run <name> <ranks> <tidal train arguments...>: trains with "${common[@]}" and the arguments, under
# "${MPIRUN[@]}" -np <ranks> for more than one rank; the metrics in $dir/<name>.jsonl, the output in
# $dir/<name>.log (printed, and the script stopped, when the run fails). Needs $tidal, $dir,
# common and MPIRUN of the sourcing script.
run() {
  local name=$1 np=$2; shift 2
  local launch=()
  [ "$np" = 1 ] || launch=("${MPIRUN[@]}" -np "$np")
  "${launch[@]}" "$tidal" train "${common[@]}" "$@" --metrics "$dir/$name.jsonl" > "$dir/$name.log" 2>&1 ||
    { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
}
