#!/usr/bin/env bash
# model.init_from and tidal export on bad input: each case exits with code 2 and one message that
# names the file and the tensor or key. The directories are a tiny GPT2LMHeadModel saved by
# transformers (tests/oracle/hf_reference.py), then broken one way each.
# Usage: check_hf_errors.sh TIDAL HF_PYTHON HF_REFERENCE_PY
set -euo pipefail
tidal=$1 py=$2 ref=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$py" "$ref" make gpt2 "$dir/good" n_layer=2 n_head=2 n_embd=16 vocab_size=40 n_positions=16 seed=5
train=(train --set train.steps=1 --set train.batch_size=2 --set train.eval_every=0 --set model.seq_len=8)

# expect DESCRIPTION MESSAGE ARGS...: tidal ARGS exits 2 and prints MESSAGE.
expect() {
  local what=$1 message=$2; shift 2
  set +e
  "$tidal" "$@" > "$dir/out.log" 2>&1
  local rc=$?
  set -e
  if [ $rc -ne 2 ] || ! grep -qF -- "$message" "$dir/out.log"; then
    cat "$dir/out.log"
    echo "FAIL ($what): exit $rc, expected 2 and the message: $message"
    exit 1
  fi
  echo "ok: $what: $(grep -F -- "$message" "$dir/out.log" | head -1)"
}

# broken NAME PYTHON: a copy of the good directory, changed by PYTHON (d = its path).
broken() {
  rm -rf "$dir/$1"
  cp -r "$dir/good" "$dir/$1"
  "$py" - "$dir/$1" <<PYEOF
import json, os, sys
from safetensors.torch import load_file, save_file
d = sys.argv[1]
st = d + "/model.safetensors"
$2
PYEOF
}

"$tidal" "${train[@]}" --set model.init_from="$dir/good" > "$dir/ok.log"
grep -q "initialized from" "$dir/ok.log" || { cat "$dir/ok.log"; echo "FAIL: the good directory did not load"; exit 1; }

expect "a key set against config.json" "model.n_layer = 3 (--set model.n_layer=3) contradicts" \
  "${train[@]}" --set model.init_from="$dir/good" --set model.n_layer=3
expect "not a directory" "is not a directory" "${train[@]}" --set model.init_from="$dir/nowhere"

broken t5 'c = json.load(open(d + "/config.json")); c["model_type"] = "t5"; json.dump(c, open(d + "/config.json", "w"))'
expect "another architecture" "config.json: model_type \"t5\" is not an architecture tidal reads" \
  "${train[@]}" --set model.init_from="$dir/t5"

broken badjson 'open(d + "/config.json", "w").write("{\"model_type\": \"gpt2\", ")'
expect "malformed config.json" "badjson/config.json: malformed JSON" "${train[@]}" --set model.init_from="$dir/badjson"

broken noheads 'c = json.load(open(d + "/config.json")); c["n_head"] = 0; json.dump(c, open(d + "/config.json", "w"))'
expect "zero heads" "\"n_head\" is 0; it must be a whole number from 1 to 2147483647" "${train[@]}" \
  --set model.init_from="$dir/noheads"

broken floatlayers 'c = json.load(open(d + "/config.json")); c["n_layer"] = 3.3e54; json.dump(c, open(d + "/config.json", "w"))'
expect "a layer count written as a huge float" "\"n_layer\" is 3.3e+54; transformers writes a whole number there" \
  "${train[@]}" --set model.init_from="$dir/floatlayers"

broken act 'c = json.load(open(d + "/config.json")); c["activation_function"] = "relu"; json.dump(c, open(d + "/config.json", "w"))'
expect "an activation tidal lacks" "\"activation_function\" is \"relu\"" "${train[@]}" --set model.init_from="$dir/act"

broken missing 't = load_file(st); del t["transformer.h.1.mlp.c_fc.bias"]; save_file(t, st, {"format": "pt"})'
expect "a missing tensor" "the weights have no tensor 'transformer.h.1.mlp.c_fc.bias'" \
  "${train[@]}" --set model.init_from="$dir/missing"

broken extra 't = load_file(st); t["transformer.h.7.ln_1.weight"] = t["transformer.h.0.ln_1.weight"].clone(); save_file(t, st, {"format": "pt"})'
expect "an extra tensor" "tensor 'transformer.h.7.ln_1.weight' is not part of the GPT2LMHeadModel" \
  "${train[@]}" --set model.init_from="$dir/extra"

broken shape 'c = json.load(open(d + "/config.json")); c["n_positions"] = 20; json.dump(c, open(d + "/config.json", "w"))'
expect "a wrong shape" "tensor 'transformer.wpe.weight' is [16, 16] but" "${train[@]}" --set model.init_from="$dir/shape"

broken truncated 'n = os.path.getsize(st); os.truncate(st, n // 2)'
expect "a truncated file" "(file truncated?)" "${train[@]}" --set model.init_from="$dir/truncated"

broken garbage 'open(st, "wb").write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")'
expect "a malformed header" "malformed safetensors header" "${train[@]}" --set model.init_from="$dir/garbage"

broken noweights 'os.remove(st)'
expect "no weights" "holds neither model.safetensors nor model.safetensors.index.json" \
  "${train[@]}" --set model.init_from="$dir/noweights"

broken badindex 'os.remove(st); open(d + "/model.safetensors.index.json", "w").write("{\"weight_map\": ")'
expect "a malformed index" "model.safetensors.index.json': malformed JSON" "${train[@]}" --set model.init_from="$dir/badindex"

broken lostshard 'os.rename(st, d + "/model-00001-of-00002.safetensors"); json.dump({"weight_map": {"transformer.wte.weight": "model-00001-of-00002.safetensors", "transformer.wpe.weight": "model-00002-of-00002.safetensors"}}, open(d + "/model.safetensors.index.json", "w"))'
expect "a shard missing" "names shard 'model-00002-of-00002.safetensors' (for 'transformer.wpe.weight'), which is missing" \
  "${train[@]}" --set model.init_from="$dir/lostshard"

# Token data with ids past the model's vocabulary (40).
"$py" - "$dir/big.bin" <<'PYEOF'
import struct, sys
ids = [i % 57 for i in range(400)]
header = [20240520, 1, len(ids)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *header) + struct.pack(f"<{len(ids)}H", *ids))
PYEOF
expect "a vocabulary larger than the model's" "big.bin" "${train[@]}" --set model.init_from="$dir/good" \
  --set data.kind=tokens --set data.path="$dir/big.bin"

expect "export of something else" "is not a tidal checkpoint" \
  export --format hf "$dir/good" "$dir/out"
echo "PASS"
