#!/usr/bin/env bash
# Activation checkpointing changes memory, not results: GPT, BERT and ViT (dropout on, gradient
# accumulation on) give bitwise the same per-step losses and eval loss with
# train.activation_checkpointing = none, blocks, every_k (k = 2 over 3 blocks: an uneven run) and
# blocks with host offload; and the activation pool's peak is smaller with it.
# usage: check_activation_checkpointing.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--set train.steps=6 --set model.dropout=0.1 --set model.n_layer=3 --set train.batch_size=8
        --set train.micro_batch_size=4 --set train.eval_every=3 --set train.eval_batches=2 --set train.warmup_steps=2)
declare -A model_sets=(
  [gpt]=""
  [bert]="--set model.type=bert"
  [vit]="--set model.type=vit --set data.kind=images --set model.image_size=16 --set model.patch_size=4"
)
variants=(none blocks every_k offload)
for model in gpt bert vit; do
  for v in "${variants[@]}"; do
    case $v in
      none) ck=(--set train.activation_checkpointing=none) ;;
      blocks) ck=(--set train.activation_checkpointing=blocks) ;;
      every_k) ck=(--set train.activation_checkpointing=every_k --set train.activation_checkpointing_k=2) ;;
      offload) ck=(--set train.activation_checkpointing=blocks --set train.activation_offload=host) ;;
    esac
    # shellcheck disable=SC2086
    "$tidal" train "${common[@]}" ${model_sets[$model]} "${ck[@]}" --metrics "$dir/${model}_$v.jsonl" > /dev/null
  done
done
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def read(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    losses = [(r["step"], r["loss"]) for r in rows if "loss" in r and not r.get("summary")]
    evals = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    summary = [r for r in rows if r.get("summary")][-1]
    return losses, evals, summary
for model in ("gpt", "bert", "vit"):
    ref_losses, ref_evals, ref = read(f"{model}_none")
    assert len(ref_losses) == 6, ref_losses
    for v in ("blocks", "every_k", "offload"):
        losses, evals, s = read(f"{model}_{v}")
        assert losses == ref_losses, f"{model} {v}: step losses differ\n{losses}\n{ref_losses}"
        assert evals == ref_evals and s["final_loss"] == ref["final_loss"], f"{model} {v}: eval losses differ"
        peak, ref_peak = s["peak_bytes"]["activations"], ref["peak_bytes"]["activations"]
        assert peak < ref_peak, f"{model} {v}: activation peak {peak} not below {ref_peak}"
        print(f"{model:>4} {v:>8}: 6 step losses and evals bitwise equal; activation peak {peak / 2**20:.2f} MiB "
              f"vs {ref_peak / 2**20:.2f} MiB without")
PY
