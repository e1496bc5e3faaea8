#!/usr/bin/env bash
# model.init_from under 1D tensor 2 x pipeline 2 (4 ranks): each rank copies only its blocks of its
# stage's parameters out of a GPT2LMHeadModel directory, and the run's losses (the first one
# included) equal one process's from the same directory within 1e-4 (relative); so do tensor 2 x
# data 2 under ZeRO stage 2 (the chunk keeper). The vocabulary, 97, is odd like GPT-2's 50257:
# tensor 2 pads it to 98. Every rank reports what it copied and its peak host memory.
# usage: check_hf_init.sh path/to/tidal HF_PYTHON HF_REFERENCE_PY <mpirun command...>
set -euo pipefail
tidal=$1 py=$2 ref=$3; shift 3
MPIRUN=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
"$py" "$ref" make gpt2 "$dir/hf" n_layer=4 n_head=4 n_embd=64 vocab_size=97 n_positions=32 seed=9
common=(--set model.init_from="$dir/hf" --set model.seq_len=16 --set train.steps=6 --set train.batch_size=8
        --set train.eval_every=3 --set train.eval_batches=2 --set train.warmup_steps=2)
"$tidal" train "${common[@]}" --metrics "$dir/single.jsonl" > "$dir/single.log"
"${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" --set parallel.tensor.size=2 --set parallel.pipeline=2 \
  --metrics "$dir/tensor2_pipeline2.jsonl" > "$dir/tp_pp.log"
"${MPIRUN[@]}" -np 4 "$tidal" train "${common[@]}" --set parallel.tensor.size=2 --set parallel.data=2 \
  --set zero.stage=2 --metrics "$dir/tensor2_data2_zero2.jsonl" > "$dir/tp_dp.log"
for log in single tp_pp tp_dp; do
  grep -A1 "initialized from" "$dir/$log.log" || { cat "$dir/$log.log"; echo "FAIL: $log did not report its load"; exit 1; }
done
grep -q "rank 3: copied" "$dir/tp_pp.log" || { echo "FAIL: no per-rank load report"; exit 1; }
/usr/bin/python3 - "$dir" "$support" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from runs import compare
for name in ("tensor2_pipeline2", "tensor2_data2_zero2"):
    compare(sys.argv[1], name, "single", 1e-4, all_steps=True)
PY
echo PASS
