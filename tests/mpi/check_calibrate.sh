#!/usr/bin/env bash
# `tidal calibrate` measures this machine over two ranks and writes a hardware file that
# `sim::load_hardware` reads back (every figure above zero; the GEMM rates within sight of each
# other's order, memory faster than nothing); one process is a user error (exit 2) naming the fix.
# usage: check_calibrate.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$@" -np 2 "$tidal" calibrate --quick --out "$dir/hw.toml" > "$dir/log" 2>&1 || { cat "$dir/log"; echo "FAIL: calibrate"; exit 1; }
cat "$dir/log"
/usr/bin/python3 - "$dir/hw.toml" <<'PY'
import sys, tomllib
h = tomllib.load(open(sys.argv[1], "rb"))
assert h["device"]["kind"] == "cpu" and h["devices_per_node"] == 2, h
figures = [h["device"]["memory_gib"], h["device"]["memory_gbps"], h["host"]["memory_gib"], h["host"]["device_gbps"],
           *h["device"]["tflops"].values(), *h["links"]["intra_node_pair"].values(),
           *h["links"]["intra_node_collective"].values()]
assert len(figures) == 11 and all(f > 0 for f in figures), h
assert "inter_node" not in h["links"], "one node measured: no inter-node link"
assert "measured by tidal calibrate" in h["source"], h["source"]
print(f"PASS: calibrate wrote {len(figures)} figures above zero: {h['device']['tflops']} TFLOP/s")
PY
set +e
"$tidal" calibrate --quick --out "$dir/one.toml" > "$dir/one.log" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "launch it with two ranks or more" "$dir/one.log" && [ ! -e "$dir/one.toml" ] ||
  { cat "$dir/one.log"; echo "FAIL: one process: exit $rc, expected 2 naming mpirun -np 2"; exit 1; }
echo "PASS: one process is refused with exit 2"
