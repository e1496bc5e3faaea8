#!/usr/bin/env bash
# `tidal train --tensorboard DIR` beside --metrics: TensorBoard's own event reader
# (tensorboard's EventAccumulator, the test environment's pinned PyPI package) finds every scalar
# of every step and eval line of the JSON-lines metrics, step for step (check_tensorboard.py).
# Run in fp16 with evaluations, so the loss scale and eval loss are among them, and again with
# train.tensorboard_dir from the config into the same directory (a second event file).
# usage: check_tensorboard.sh path/to/tidal path/to/python
set -euo pipefail
tidal=$1 python=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
small=(--set train.steps=12 --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.seq_len=32
       --set train.batch_size=4 --set train.eval_every=4 --set train.eval_batches=1 --set train.precision=fp16)
"$tidal" train "${small[@]}" --metrics "$dir/metrics.jsonl" --tensorboard "$dir/tb" > "$dir/log" 2>&1 ||
  { cat "$dir/log"; echo "FAIL: tidal train --tensorboard"; exit 1; }
"$python" "$here/check_tensorboard.py" "$dir/metrics.jsonl" "$dir/tb"
"$tidal" train "${small[@]}" --set train.steps=6 --set train.tensorboard_dir="$dir/tb_key" \
  --metrics "$dir/key.jsonl" > /dev/null
"$python" "$here/check_tensorboard.py" "$dir/key.jsonl" "$dir/tb_key"
grep -q '"loss_scale"' "$dir/metrics.jsonl" || { echo "FAIL: no loss scale in the fp16 metrics"; exit 1; }
echo "PASS: TensorBoard reads every scalar of the metrics (--tensorboard and train.tensorboard_dir)"
