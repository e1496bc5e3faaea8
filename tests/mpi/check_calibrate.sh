#!/usr/bin/env bash
# `tidal calibrate` measures this machine over two ranks (leaving nothing in --disk-dir) and
# writes a hardware file that `sim::load_hardware` reads back (every figure above zero; the GEMM
# rates within sight of each other's order, memory faster than nothing, the op rates by dtype and
# size, the links by message size); one process is a user error (exit 2) naming the fix;
# parallel.auto picks a layout on that file, or on the machine measured at start-up.
# usage: check_calibrate.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/disk"
"$@" -np 2 "$tidal" calibrate --quick --out "$dir/hw.toml" --disk-dir "$dir/disk" > "$dir/log" 2>&1 ||
  { cat "$dir/log"; echo "FAIL: calibrate"; exit 1; }
cat "$dir/log"
# The disk's timings leave nothing behind (every rank's commit file lay in one directory, removed).
[ -z "$(ls -A "$dir/disk")" ] || { ls -la "$dir/disk"; echo "FAIL: calibrate left files in --disk-dir"; exit 1; }
/usr/bin/python3 - "$dir/hw.toml" <<'PY'
import sys, tomllib
h = tomllib.load(open(sys.argv[1], "rb"))
assert h["device"]["kind"] == "cpu" and h["devices_per_node"] == 2, h
links = [h["links"]["intra_node_pair"], h["links"]["intra_node_collective"]]
figures = [h["device"]["memory_gib"], h["device"]["memory_gbps"], h["host"]["memory_gib"], h["host"]["device_gbps"],
           *h["device"]["tflops"].values(), *[l[k] for l in links for k in ("gbps", "latency_us", "bytes")]]
assert len(figures) == 13 and all(f > 0 for f in figures), h
# Each link's bandwidth by message size, below the size its gbps was measured at.
for l in links:
    assert l["sizes"] and all(b > 0 and g > 0 and b < l["bytes"] for b, g in l["sizes"]), l
assert "inter_node" not in h["links"], "one node measured: no inter-node link"
assert "measured by tidal calibrate" in h["source"], h["source"]
d = h["device"]
op_rates = [*d["elementwise_gbps"].values(), d["optimizer_gbps"], *d["attention_tflops"].values(),
            *[rate for rows in d["gemm_sizes"].values() for _, rate in rows],
            *[rate for rows in d["elementwise_sizes"].values() for _, rate in rows]]
assert all(f > 0 for f in op_rates) and len(d["gemm_sizes"]["fp32"]) >= 2, d
assert sorted(d["elementwise_gbps"]) == sorted(d["elementwise_sizes"]) == ["bf16", "fp16", "fp32"], d
print(f"PASS: calibrate wrote {len(figures)} figures above zero: {h['device']['tflops']} TFLOP/s")
PY
# Four ranks: on fewer than 4 cores their threads oversubscribe the cores, and the file says by how
# much (the rates are then each rank's with all four computing, sim/hardware.h).
"$@" -np 4 "$tidal" calibrate --quick --out "$dir/hw4.toml" > "$dir/log4" 2>&1 || { cat "$dir/log4"; echo "FAIL: calibrate on 4 ranks"; exit 1; }
/usr/bin/python3 - "$dir/hw4.toml" "$(nproc)" <<'PY'
import sys, tomllib
h, cores = tomllib.load(open(sys.argv[1], "rb")), int(sys.argv[2])
threads = max(1, cores // 4)  # each rank's share of the cores (engine/launch.cpp)
expected = max(1.0, 4 * threads / cores)
got = h["device"].get("oversubscription", 1.0)
assert h["devices_per_node"] == 4 and abs(got - expected) < 1e-9, (got, expected, h["device"])
assert all(r > 0 for r in h["device"]["tflops"].values()), h["device"]
print(f"PASS: 4 ranks on {cores} cores: oversubscription {got}")
PY
set +e
"$tidal" calibrate --quick --out "$dir/one.toml" > "$dir/one.log" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "launch it with two ranks or more" "$dir/one.log" && [ ! -e "$dir/one.toml" ] ||
  { cat "$dir/one.log"; echo "FAIL: one process: exit $rc, expected 2 naming mpirun -np 2"; exit 1; }
echo "PASS: one process is refused with exit 2"

# parallel.auto: every rank picks the same layout by the cost model (on the file just written, and
# on this machine measured at start-up) and trains under it.
for hardware in "$dir/hw.toml" ""; do
  "$@" -np 2 "$tidal" train --set parallel.auto=true --set parallel.hardware="$hardware" --set train.steps=2 \
    --set model.n_layer=2 --set train.batch_size=4 > "$dir/auto.log" 2>&1 || { cat "$dir/auto.log"; echo "FAIL: parallel.auto"; exit 1; }
  grep -q "^parallel.auto: the fastest of [0-9]* layouts on" "$dir/auto.log" && grep -q "^done: 2 steps" "$dir/auto.log" ||
    { cat "$dir/auto.log"; echo "FAIL: parallel.auto printed no choice or did not train"; exit 1; }
  grep "^parallel.auto" "$dir/auto.log"
done
echo "PASS: parallel.auto chose a layout and trained under it"
