#!/usr/bin/env bash
# BERT (masked LM on the Markov language) and ViT (synthetic images) train from the CLI: the
# eval loss at the end is well below the first step's loss.
# usage: check_models_train.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tidal" train --set model.type=bert --set train.steps=150 --set train.eval_every=0 --metrics "$dir/bert.jsonl" > /dev/null
"$tidal" train --set model.type=vit --set data.kind=images --set model.image_size=16 --set model.patch_size=4 \
  --set train.steps=60 --set train.eval_every=0 --metrics "$dir/vit.jsonl" > /dev/null
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
for model, factor in (("bert", 0.92), ("vit", 0.5)):
    lines = [json.loads(l) for l in open(f"{sys.argv[1]}/{model}.jsonl")]
    first, last = lines[0]["loss"], lines[-1]["final_loss"]
    print(f"{model}: first step loss {first:.4f}, final eval loss {last:.4f}")
    assert last < factor * first, f"{model} did not learn: {first} -> {last}"
PY
