#!/usr/bin/env bash
# Heterogeneous memory on many ranks (patrickstar-v2 sec. 6.2 and 7): every rank's device tier is
# capped by memory.device_limit, and its lists - its ZeRO shard, the remote chunks it fetches for a
# group, its optimizer states - move between its device tier and its host by its own warm-up
# trace. Each run gives the same layout's uncapped losses bitwise (per step, evals, final):
# - data 2 and data 4 at zero.stage 3, capped at 25% of a rank's model data, with Belady's
#   eviction and with LRU's: every rank's device peak within the cap, every rank moving chunks
#   in every step (per-rank bytes in the metrics), and Belady moving no more bytes than LRU
#   after the warm-up (summed over the ranks); both again with memory.host_limit at the figure
#   the start-up check asks of each rank, without and with a disk tier (host_least below);
# - pipeline 2 x 1D tensor 2 and data 2 x 2D tensor 4 (bf16, ZeRO-2), capped at 30% of the
#   largest rank's model data.
# And `tidal plan` under mpirun for data 2 x pipeline 2 x 1D tensor 2 (bf16, ZeRO-3) with a device
# and a host cap on each rank: the largest GPT it answers trains 2 steps under the caps, and one
# layer more exits 2 naming the planner's figure for the cap that binds - once where the device
# binds, once where the host does. `tidal trace` under mpirun writes each rank's own tide, and
# `tidal chunk-search` searches every rank's lists: its best size is the one training lays out.
# usage: check_offload_parallel.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MPIRUN=("$@")
support=$(cd "$(dirname "$0")/../support" && pwd)
# A GPT whose model data is large beside one sequence's activations (8 layers of width 256, 16
# positions, one sequence per data rank), in chunks of 270,000 elements.
common=(--set model.n_embd=256 --set model.n_layer=8 --set model.n_head=4 --set model.seq_len=16
        --set train.steps=6 --set train.eval_every=3 --set train.eval_batches=1 --set memory.chunk_size=270000
        --set memory.offload=chunk)
# cap <name> <fraction>: that fraction of the largest rank's model data in run <name>.
cap() {
  /usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(int(max(rows[-1]['model_data']['model_data_bytes_per_rank']) * float(sys.argv[2])))" "$dir/$1.jsonl" "$2"
}
# layout <name> <ranks> <fraction> <evictions> <arguments...>: uncapped, then capped per eviction.
layout() {
  local name=$1 np=$2 fraction=$3 evictions=$4; shift 4
  "${MPIRUN[@]}" -np "$np" "$tidal" train "${common[@]}" "$@" --set memory.device_limit=64GiB \
    --metrics "$dir/${name}_uncapped.jsonl" > /dev/null
  local limit
  limit=$(cap "${name}_uncapped" "$fraction")
  for eviction in $evictions; do
    "${MPIRUN[@]}" -np "$np" "$tidal" train "${common[@]}" "$@" --set memory.device_limit="$limit" \
      --set memory.eviction="$eviction" --metrics "$dir/${name}_$eviction.jsonl" > "$dir/${name}_$eviction.log" 2>&1 ||
      { cat "$dir/${name}_$eviction.log"; echo "FAIL: $name under a $limit-byte cap"; exit 1; }
  done
}
layout data2 2 0.25 "belady lru" --set parallel.data=2 --set zero.stage=3 --set train.batch_size=2
# At the host's least: memory.host_limit at what the start-up check asks of each rank, without and
# with a disk tier, under a device cap; the same losses bitwise. The ring reduce-scatter's partial
# sum beside a chunk on the host is counted (data 2), and the remote chunks of ZeRO-3's groups go
# to the host only into room the rank's own chunks do not need back (data 4).
# host_least <layout> <ranks> <fraction> <arguments...>: after `layout`, its uncapped run's figures.
host_least() {
  local name=$1 np=$2 fraction=$3; shift 3
  local all least
  read -r all least < <(/usr/bin/python3 -c "
import json, sys
md = [json.loads(l) for l in open(sys.argv[1])][-1]['model_data']
print(max(md['host_needs_bytes_per_rank']), max(md['host_needs_with_disk_bytes_per_rank']))" "$dir/${name}_uncapped.jsonl")
  for tight in "host_all $all" "host_disk $least --set memory.disk_dir=$dir"; do
    local run bytes disk
    read -r run bytes disk <<< "$tight"
    # shellcheck disable=SC2086 # $disk: none or two words
    "${MPIRUN[@]}" -np "$np" "$tidal" train "${common[@]}" "$@" --set memory.device_limit="$(cap "${name}_uncapped" "$fraction")" \
      --set memory.host_limit="$bytes" $disk --metrics "$dir/${name}_$run.jsonl" > "$dir/${name}_$run.log" 2>&1 ||
      { cat "$dir/${name}_$run.log"; echo "FAIL: $name under memory.host_limit = $bytes (the start-up check's figure)"; exit 1; }
  done
}
host_least data2 2 0.25 --set parallel.data=2 --set zero.stage=3 --set train.batch_size=2
layout data4 4 0.25 "belady lru" --set parallel.data=4 --set zero.stage=3 --set train.batch_size=4
host_least data4 4 0.5 --set parallel.data=4 --set zero.stage=3 --set train.batch_size=4
layout p2_t2 4 0.30 belady --set parallel.pipeline=2 --set parallel.tensor.size=2 --set train.batch_size=2 \
  --set train.micro_batch_size=1
layout d2_2d4 8 0.30 belady --set parallel.data=2 --set parallel.tensor.size=4 --set parallel.tensor.mode=2d \
  --set train.batch_size=4 --set train.precision=bf16 --set zero.stage=2
plan_model=(--set model.n_embd=256 --set model.n_head=4 --set model.seq_len=16 --set train.batch_size=4
            --set memory.offload=chunk --set parallel.data=2 --set parallel.pipeline=2 --set parallel.tensor.size=2
            --set zero.stage=3 --set train.precision=bf16 --set train.micro_batch_size=1)
# check_plan <name> <binding cap key> <caps...>
check_plan() {
  local name=$1 key=$2; shift 2
  "${MPIRUN[@]}" -np 8 "$tidal" plan "${plan_model[@]}" "$@" --max-layers 24 > "$dir/$name.txt"
  cat "$dir/$name.txt"
  read -r n needs < <("${MPIRUN[@]}" -np 8 "$tidal" plan "${plan_model[@]}" "$@" --max-layers 24 --json |
    /usr/bin/python3 -c "
import json, sys
plan = json.load(sys.stdin)
last = plan['rows'][-1]
print(plan['largest'], last['device_needs'] if '$key' == 'memory.device_limit' else last['host_needs'])")
  "${MPIRUN[@]}" -np 8 "$tidal" train "${plan_model[@]}" "$@" --set model.n_layer="$n" --set train.steps=2 \
    > "$dir/$name-train.log" 2>&1 || { cat "$dir/$name-train.log"; echo "FAIL: $name: $n layers do not train"; exit 1; }
  set +e
  "${MPIRUN[@]}" -np 8 "$tidal" train "${plan_model[@]}" "$@" --set model.n_layer=$((n + 1)) --set train.steps=2 \
    > "$dir/$name-over.log" 2>&1
  local rc=$?
  set -e
  grep -q "$key" "$dir/$name-over.log" && grep -q "$needs" "$dir/$name-over.log" && [[ $rc -eq 2 ]] ||
    { grep error "$dir/$name-over.log"; echo "FAIL: $name: $((n + 1)) layers: exit $rc, want 2 naming $key and $needs"; exit 1; }
  echo "$name: $n layers train under the caps; $((n + 1)) exit 2: $(grep -m1 -o "error.*" "$dir/$name-over.log" | cut -c1-160)..."
}
check_plan plan_device memory.device_limit --set memory.device_limit=3MiB --set memory.host_limit=1GiB
check_plan plan_host memory.host_limit --set memory.device_limit=64MiB --set memory.host_limit=20MiB
best=$("${MPIRUN[@]}" -np 8 "$tidal" chunk-search "${plan_model[@]}" --set model.n_layer=4 \
  --set memory.device_limit=64MiB --json |
  /usr/bin/python3 -c "
import json, sys
r = json.load(sys.stdin)
assert r['best'] == r['training_size'], r
print(r['best'])")
"${MPIRUN[@]}" -np 8 "$tidal" train "${plan_model[@]}" --set model.n_layer=4 --set train.steps=1 \
  --set memory.device_limit=64MiB > "$dir/search-train.log"
grep -q "chunks of $best elements" "$dir/search-train.log" ||
  { grep "model data" "$dir/search-train.log"; echo "FAIL: chunk-search's best $best is not what training lays out"; exit 1; }
echo "chunk-search under mpirun: best $best elements, the size training lays out"
# Each rank's tide: pipeline 2 x data 2 at ZeRO-3 (the stages hold different layers).
"${MPIRUN[@]}" -np 4 "$tidal" trace "${common[@]}" --set parallel.pipeline=2 --set parallel.data=2 --set zero.stage=3 \
  --set train.batch_size=2 --set train.micro_batch_size=1 --set memory.device_limit=8MiB \
  --out "$dir/tide.json" --chart "$dir/tide.svg" > "$dir/trace.log"
/usr/bin/python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
tides = [json.load(open(f"{d}/tide-rank{r}.json")) for r in range(4)]
for r, t in enumerate(tides):
    assert t["rank"] == r and t["moments"] and os.path.getsize(f"{d}/tide-rank{r}.svg") > 0, f"rank {r}'s tide"
    for m in t["moments"]:
        assert m["device_bytes"] == m["chunk_bytes"] + m["non_model_bytes"] or m["non_model_bytes"] == 0
    print(f"rank {r}: {len(t['moments'])} moments, model data {t['model_data_bytes']} bytes, least device cap "
          f"{t['least_device_limit_bytes']} bytes")
# Stage 0 (ranks 0, 1) and stage 1 (ranks 2, 3) trace their own layers' operators.
assert tides[0]["moments"][0]["operator"] != tides[2]["moments"][0]["operator"]
PY
/usr/bin/python3 - "$dir" "$support" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
for name, evictions in (("data2", ("belady", "lru")), ("data4", ("belady", "lru")), ("p2_t2", ("belady",)),
                        ("d2_2d4", ("belady",))):
    moved = {}
    for eviction in evictions:
        run = f"{name}_{eviction}"
        compare(d, run, f"{name}_uncapped", 0.0, all_steps=True)
        rows = [json.loads(l) for l in open(f"{d}/{run}.jsonl")]
        steps = [r for r in rows if "loss" in r and not r.get("summary")]
        summary = rows[-1]
        limit = summary["model_data"]["offload"]["device_limit_bytes"]
        peaks = steps[-1]["device_peak_bytes_per_rank"]
        per_rank = [[a + b for a, b in zip(r["bytes_host_to_device_per_rank"], r["bytes_device_to_host_per_rank"])]
                    for r in steps]
        moved[eviction] = sum(sum(step) for step in per_rank[1:])
        print(f"{run}: cap {limit} bytes ({limit / max(summary['model_data']['model_data_bytes_per_rank']):.0%} of "
              f"the largest rank's model data); device peaks per rank {peaks}; MiB moved per rank and step "
              f"{[[round(b / 2**20, 1) for b in step] for step in per_rank]}")
        assert all(p <= limit for p in peaks), f"{run}: a rank's device tier passed the cap"
        assert all(all(b > 0 for b in step) for step in per_rank), f"{run}: a rank moved nothing in a step"
    if len(moved) == 2:
        print(f"{name}: bytes moved after the warm-up, all ranks: belady {moved['belady']}, lru {moved['lru']}")
        assert moved["belady"] <= moved["lru"], f"{name}: Belady moved more than LRU"
for run in ("data2_host_all", "data2_host_disk", "data4_host_all", "data4_host_disk"):
    compare(d, run, run[:5] + "_uncapped", 0.0, all_steps=True)
    summary = [json.loads(l) for l in open(f"{d}/{run}.jsonl")][-1]["model_data"]["offload"]
    print(f"{run}: host at the start-up check's figure, {summary['evictions']} evictions, "
          f"{summary.get('disk', {}).get('chunks', 0)} chunks' states on disk")
print("PASS: heterogeneous memory on 2 to 8 ranks gives the uncapped losses bitwise")
PY
