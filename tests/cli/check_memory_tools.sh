#!/usr/bin/env bash
# The memory tools of the tidal command:
# - `tidal plan` answers the largest GPT (layers at a fixed width) under a device and a host cap;
#   the answer trains 2 steps under those caps, and one layer more stops with exit 2 and an
#   out-of-memory error naming the cap that binds. Checked once where the host binds and once
#   where the device tier does; there the planner traces that model's warm-up, and the run names
#   the same least device cap in bytes.
# - `tidal chunk-search` on the reference GPT (configs/reference-gpt.toml), the same with 24
#   layers, and GPT-2 small's and medium's shapes (12 and 24 layers) finds a chunk size under 10%
#   fragmentation, the size training picks; a range that holds no parameter is exit 2.
# - `tidal trace` writes the warm-up's tide: JSON whose moments add up to the device tier's
#   bytes, within the cap, and an SVG document.
# - `tidal plan --world N` on a model that no layout fits in the device alone (Llama 2 7B's shape
#   on one H100) picks memory.offload where the hardware file times the host's AdamW (the H100
#   file), and where it does not (System II's A100 file), ends by naming memory.offload and how to
#   see its memory, and that command predicts it fitting.
# usage: check_memory_tools.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root=$(cd "$(dirname "$0")/../.." && pwd)
model=(--set model.n_embd=256 --set model.n_head=4 --set model.seq_len=32 --set train.batch_size=2
       --set memory.offload=chunk)
train=(--set train.steps=2 --set train.eval_batches=1)

check_plan() {  # name, binding tier ("host" or "device tier"), caps...
  local name=$1 binding=$2
  shift 2
  "$tidal" plan "${model[@]}" "$@" > "$dir/$name.txt"
  cat "$dir/$name.txt"
  local n
  read -r n needs < <("$tidal" plan "${model[@]}" "$@" --json | /usr/bin/python3 -c "
import json, sys
plan = json.load(sys.stdin)
last = plan['rows'][-1]
print(plan['largest'], last['device_needs'] if last['device_needs_traced'] else '')")
  grep -q "need .* on the $binding" "$dir/$name.txt" || { echo "FAIL: $name: want the $binding to bind"; exit 1; }
  "$tidal" train "${model[@]}" "$@" "${train[@]}" --set model.n_layer="$n" > "$dir/$name-train.log" ||
    { echo "FAIL: $name: the planned $n layers do not train"; cat "$dir/$name-train.log"; exit 1; }
  echo "$name: $n layers train 2 steps under the caps"
  set +e
  local out rc
  out=$("$tidal" train "${model[@]}" "$@" "${train[@]}" --set model.n_layer=$((n + 1)) 2>&1 >/dev/null)
  rc=$?
  set -e
  echo "$name: $((n + 1)) layers: exit $rc: $out"
  local key=memory.host_limit
  [[ $binding == host ]] || key=memory.device_limit
  [[ $rc -eq 2 && $out == *"out of "*"memory"*"$key"* ]] || { echo "FAIL: $name: want exit 2 naming $key"; exit 1; }
  # A traced figure is the one the run names: the least device cap it trains under.
  [[ -z $needs || $out == *"needs at least $needs bytes"* ]] ||
    { echo "FAIL: $name: the run should name the planner's $needs bytes"; exit 1; }
}
check_plan host-binds host --set memory.device_limit=24MiB --set memory.host_limit=96MiB
check_plan device-binds "device tier" --set memory.device_limit=12MiB --set memory.host_limit=1GiB \
  --set memory.chunk_size=300000

for spec in reference-gpt "reference-gpt --set model.n_layer=24" gpt2-small gpt2-medium; do
  read -r config extra <<< "$spec"
  # shellcheck disable=SC2086
  "$tidal" chunk-search -c "$root/configs/$config.toml" $extra > "$dir/search.txt"
  tail -n 1 "$dir/search.txt"
  # shellcheck disable=SC2086
  "$tidal" chunk-search -c "$root/configs/$config.toml" $extra --json | /usr/bin/python3 -c "
import json, sys
r = json.load(sys.stdin)
best = r['best_fragmentation']
assert best < 0.10, f'{sys.argv[1]}: best fragmentation {best:.2%} >= 10%'
assert r['best'] == r['training_size'], (r['best'], r['training_size'])
assert min(s['fragmentation'] for s in r['sizes']) == best
print(f\"{sys.argv[1]}: {len(r['sizes'])} sizes, best {r['best']} elements at {best:.2%} fragmentation\")" "$spec"
done
set +e
out=$("$tidal" chunk-search -c "$root/configs/gpt2-small.toml" --from 1000 --to 2000 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc -eq 2 && $out == *"--from"* ]] || { echo "FAIL: chunk-search below the largest parameter: exit $rc: $out"; exit 1; }

"$tidal" trace "${model[@]}" --set model.n_layer=3 --set memory.device_limit=24MiB --out "$dir/tide.json" \
  --chart "$dir/tide.svg"
/usr/bin/python3 - "$dir/tide.json" "$dir/tide.svg" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
tide = json.load(open(sys.argv[1]))
moments = tide["moments"]
assert len(moments) > 10, len(moments)
for m in moments:
    assert m["chunk_bytes"] + m["non_model_bytes"] == m["device_bytes"], m
    assert m["device_bytes"] <= tide["device_limit_bytes"], m
assert max(m["chunk_bytes"] for m in moments) <= tide["warmup_chunk_bytes"]
assert max(m["non_model_bytes"] for m in moments) == tide["peak_non_model_bytes"]
ops = [m["operator"] for m in moments]
assert ops[0].startswith("forward") and ops[-1] == "optimizer step", (ops[0], ops[-1])
root = ET.parse(sys.argv[2]).getroot()
assert root.tag.endswith("svg") and len(root.findall("{http://www.w3.org/2000/svg}polygon")) == 2
print(f"trace: {len(moments)} moments, device peak {max(m['device_bytes'] for m in moments)} <= "
      f"{tide['device_limit_bytes']}, chunks within the warm-up's share {tide['warmup_chunk_bytes']}")
PY
# Only offload fits: the planner picks it where it can time it, with its moves.
llama=(-c "$root/configs/llama2-7b.toml" --set train.batch_size=8)
h100=(--hardware "$root/configs/hardware/h100-8x.toml")
"$tidal" plan --world 1 "${llama[@]}" "${h100[@]}" --explain > "$dir/offload.txt"
grep -q '^  1\. one rank, .*offload chunk .* step [0-9.]* s, MFU' "$dir/offload.txt" &&
  grep -q "offload's moves [0-9.]* s (.* each way: states of [0-9]* chunks on the host" "$dir/offload.txt" ||
  { cat "$dir/offload.txt"; echo "FAIL: the planner should pick memory.offload for Llama 2 7B on one H100"; exit 1; }
# Nothing fits where the planner cannot time offload: it names what is left, and the command it
# names predicts a fit.
llama+=(--hardware "$root/configs/hardware/colossal-system-2.toml")
"$tidal" plan --world 1 "${llama[@]}" > "$dir/nofit.txt"
tail -1 "$dir/nofit.txt" | grep -q '^the only layout does not fit: memory.offload = "chunk" .* add to this command --configured --set memory.offload=chunk --set train.device=cuda' ||
  { cat "$dir/nofit.txt"; echo "FAIL: a plan where nothing fits should end naming memory.offload"; exit 1; }
"$tidal" plan --world 1 "${llama[@]}" --configured --set memory.offload=chunk --set train.device=cuda \
  --set train.activation_checkpointing=blocks --json > "$dir/offload.json"
/usr/bin/python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))
assert p['fits'] and p['peak_bytes']['host'] > 64 * 2**30, p['peak_bytes']
print(f\"plan: nothing fits one H100; with memory.offload the device peak is {p['peak_bytes']['device'] / 2**30:.1f} GiB, \"
      f\"the host holds {p['peak_bytes']['host'] / 2**30:.1f} GiB\")" "$dir/offload.json"
# The largest model for a machine far larger than this one (tidal plan --hardware: the cost model's
# activations, nothing run): configs/llama-h200-largest.toml is its answer for the lent H200 with
# the host and a capped disk, and the cost model's prediction of that layout agrees: it fits, with
# the host at its cap and optimizer states on disk; one layer more does not fit on the host.
h200=(-c "$root/configs/llama-h200-largest.toml" --hardware "$root/configs/hardware/h200-1x.toml")
"$tidal" plan "${h200[@]}" --max-layers 64 --json > "$dir/h200.json"
layers=$(grep -m1 '^n_layer' "$root/configs/llama-h200-largest.toml" | tr -dc 0-9)
for n in "$layers" $((layers + 1)); do
  "$tidal" plan --world 1 "${h200[@]}" --configured --set model.n_layer="$n" --json > "$dir/h200-$n.json"
done
/usr/bin/python3 - "$dir/h200.json" "$dir/h200-$layers.json" "$dir/h200-$((layers + 1)).json" "$layers" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
fits, over = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
layers = int(sys.argv[4])
assert plan["largest"] == layers, f"tidal plan --hardware answers {plan['largest']} layers, the config has {layers}"
assert plan["non_model_bytes_from"].startswith("the cost model"), plan["non_model_bytes_from"]
row = [r for r in plan["rows"] if r["layers"] == layers][0]
assert 0 < row["disk_needs"] <= plan["disk_limit"] and row["host_needs"] <= plan["host_limit"], row
assert fits["fits"], fits.get("does_not_fit")
mine = fits["ranks"][0]["peak_bytes"]
assert mine["host"] <= plan["host_limit"] and 0 < mine["disk"] <= plan["disk_limit"], mine
assert "disk tier" in fits["untimed"], fits["untimed"]
assert not over["fits"] and over["does_not_fit"].startswith("host"), over.get("does_not_fit")
print(f"plan --hardware: {layers} layers ({row['parameters']} parameters) on one H200, host "
      f"{row['host_needs'] / 2**30:.1f} GiB, disk {row['disk_needs'] / 2**30:.1f} GiB; the cost model agrees")
PY
echo "memory tools: ok"
