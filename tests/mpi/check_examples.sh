#!/usr/bin/env bash
# The programs of examples/ (tidal as a library), under mpirun -np 4 with 1D tensor 2 x data 2:
# - parallel_block_gpt registers a model of its own (GPT with parallel attention + MLP blocks):
#   its 4-rank losses (per step, evals, final) equal its one-process run's within fp32's 1e-4
#   (as check_tensor_parallel.sh), and they differ from the built-in GPT's of the same config
#   (the registered model is what trained), and so do its losses with the head and loss over
#   blocks of positions (train.loss_chunks = 3: the model adds them with add_head_and_loss);
# - early_stopping stops on a callback: with min_delta larger than any gain the second
#   evaluation stops training (train.eval_every = 3: after step 6 of 30) on every rank, the
#   summary says so, a checkpoint is written at the step it stopped, and the losses up to there
#   equal `tidal train`'s of the same config bitwise (the callback changes nothing else).
# usage: check_examples.sh path/to/tidal path/to/parallel_block_gpt path/to/early_stopping <mpirun command...>
set -euo pipefail
tidal=$1 parallel_block_gpt=$2 early_stopping=$3; shift 3
MPIRUN=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
small=(train.steps=10 model.n_layer=2 model.n_embd=64 model.n_head=4 model.seq_len=32 train.batch_size=8
       train.eval_every=5 train.eval_batches=1 train.warmup_steps=2)
layout=(parallel.tensor.size=2 parallel.data=2)
# run <name> <ranks> <program> <arguments...>
run() {
  local name=$1 np=$2 program=$3; shift 3
  local launch=()
  [ "$np" = 1 ] || launch=("${MPIRUN[@]}" -np "$np")
  "${launch[@]}" "$program" --metrics "$dir/$name.jsonl" "$@" > "$dir/$name.log" 2>&1 ||
    { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
}
sets() { for kv in "$@"; do printf -- '--set\n%s\n' "$kv"; done; }
run parallel_single 1 "$parallel_block_gpt" "${small[@]}"
run parallel_t2_d2 4 "$parallel_block_gpt" "${small[@]}" "${layout[@]}"
run parallel_t2_d2_loss_chunks 4 "$parallel_block_gpt" "${small[@]}" "${layout[@]}" train.loss_chunks=3
mapfile -t gpt_sets < <(sets "${small[@]}")
"$tidal" train "${gpt_sets[@]}" --metrics "$dir/builtin_gpt.jsonl" > /dev/null
grep -q "parallel_gpt with" "$dir/parallel_t2_d2.log" || { cat "$dir/parallel_t2_d2.log"; echo "FAIL: not the registered model"; exit 1; }

stopping=(train.steps=30 train.eval_every=3 train.eval_batches=1 model.n_layer=2 model.n_embd=64 model.n_head=4
          model.seq_len=32 train.batch_size=8)
run stopped_t2_d2 4 "$early_stopping" --patience 1 --min-delta 100 "${stopping[@]}" "${layout[@]}" \
  checkpoint.dir="$dir/ck"
mapfile -t stop_sets < <(sets "${stopping[@]}" "${layout[@]}" train.steps=30)
"${MPIRUN[@]}" -np 4 "$tidal" train "${stop_sets[@]}" --stop-after 6 --metrics "$dir/cli_t2_d2.jsonl" > /dev/null
grep -q "early stopping: stopped at the evaluation of step 6 after 6 of 30 steps" "$dir/stopped_t2_d2.log" ||
  { cat "$dir/stopped_t2_d2.log"; echo "FAIL: early stopping did not stop at step 6"; exit 1; }
[ -d "$dir/ck/step-00000006" ] || { ls -R "$dir/ck"; echo "FAIL: no checkpoint at the stop"; exit 1; }

/usr/bin/python3 - "$dir" "$support" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare, read
d = sys.argv[1]
compare(d, "parallel_t2_d2", "parallel_single", 1e-4, all_steps=True)
compare(d, "parallel_t2_d2_loss_chunks", "parallel_single", 1e-4, all_steps=True)
mine, _, _ = read(d, "parallel_single")
builtin, _, _ = read(d, "builtin_gpt")
assert any(abs(mine[s] - builtin[s]) > 1e-3 * abs(builtin[s]) for s in mine), "the parallel block trained as GPT's"
stopped, _, summary = read(d, "stopped_t2_d2")
assert summary.get("stopped_early") is True and summary["steps"] == 6 and not summary["completed"], summary
cli, _, _ = read(d, "cli_t2_d2")
assert stopped == cli, f"early-stopped losses {stopped} differ from tidal train's {cli}"
print("PASS: a registered model trains under tensor 2 x data 2 as in one process; early stopping ends every rank "
      "at step 6 with a checkpoint, its losses those of tidal train")
PY
