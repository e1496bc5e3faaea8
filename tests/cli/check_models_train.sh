#!/usr/bin/env bash
# BERT (masked LM on the Markov language) and ViT (synthetic images) train from the CLI, in fp32
# and in bf16 mixed precision (chunks): the eval loss at the end is well below the first step's
# loss, and the bf16 run ends within 2% of the fp32 one.
# usage: check_models_train.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tidal" train --set model.type=bert --set train.steps=150 --set train.eval_every=0 --metrics "$dir/bert.jsonl" > /dev/null
"$tidal" train --set model.type=vit --set data.kind=images --set model.image_size=16 --set model.patch_size=4 \
  --set train.steps=60 --set train.eval_every=0 --metrics "$dir/vit.jsonl" > /dev/null
"$tidal" train --set model.type=bert --set train.steps=150 --set train.eval_every=0 --set train.precision=bf16 \
  --metrics "$dir/bert_bf16.jsonl" > /dev/null
"$tidal" train --set model.type=vit --set data.kind=images --set model.image_size=16 --set model.patch_size=4 \
  --set train.steps=60 --set train.eval_every=0 --set train.precision=bf16 --metrics "$dir/vit_bf16.jsonl" > /dev/null
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
for model, factor in (("bert", 0.92), ("vit", 0.5)):
    final = {}
    for run in (model, model + "_bf16"):
        lines = [json.loads(l) for l in open(f"{sys.argv[1]}/{run}.jsonl")]
        first, final[run] = lines[0]["loss"], lines[-1]["final_loss"]
        print(f"{run}: first step loss {first:.4f}, final eval loss {final[run]:.4f}")
        assert final[run] < factor * first, f"{run} did not learn: {first} -> {final[run]}"
    assert abs(final[model + "_bf16"] - final[model]) < 0.02 * final[model], f"{model}: bf16 strays from fp32"
PY
