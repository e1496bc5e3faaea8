#!/usr/bin/env bash
# A sharded checkpoint out to Hugging Face: a random Llama directory (grouped-query attention,
# its final norm sharpened so that greedy decoding has no near-ties) trains 6 steps under data 2 x
# 1D tensor 2 at ZeRO-3 in bf16, each rank saving its own blocks; `tidal export --format hf` under
# mpirun -np 2 (the ranks writing the shards between them) with a --max-shard-gb small enough for
# a shard per tensor writes numbered shards and their index; transformers' from_pretrained opens
# it, and its greedy generate() of 40 tokens equals `tidal sample` of the checkpoint, token for
# token. The export reports its peak memory beside the largest tensor's bytes.
# usage: check_sharded_export.sh path/to/tidal path/to/oracle-venv/python path/to/hf_reference.py <mpirun...>
set -euo pipefail
tidal=$1 py=$2 ref=$3
shift 3
MPIRUN=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
prompt="5 17 42 101 7 199 3"
tokens=40

"$py" "$ref" make llama "$dir/llama" num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 hidden_size=64 \
  intermediate_size=96 vocab_size=211 max_position_embeddings=64 rope_theta=500.0 seed=11
"$py" - "$dir/llama/model.safetensors" <<'EOF'
import sys
from safetensors import safe_open
from safetensors.torch import load_file, save_file
tensors = load_file(sys.argv[1])
with safe_open(sys.argv[1], "pt") as f:
    meta = f.metadata()
tensors["model.norm.weight"] = tensors["model.norm.weight"] * 8.0
save_file(tensors, sys.argv[1], metadata=meta)
EOF
"${MPIRUN[@]}" -np 4 "$tidal" train --set model.init_from="$dir/llama" --set train.steps=6 --set train.batch_size=4 \
  --set model.seq_len=32 --set train.lr=1e-4 --set train.min_lr=1e-5 --set train.eval_every=0 --set train.eval_batches=1 \
  --set parallel.data=2 --set parallel.tensor.size=2 --set zero.stage=3 --set train.precision=bf16 \
  --set checkpoint.dir="$dir/ck" > "$dir/train.log" 2>&1 || { cat "$dir/train.log"; echo "FAIL: training"; exit 1; }
files=$(ls "$dir/ck/$(cat "$dir/ck/latest")"/rank-*.safetensors | wc -l)
[ "$files" -eq 4 ] || { ls "$dir/ck"/*; echo "FAIL: $files rank files, want 4"; exit 1; }
"${MPIRUN[@]}" -np 2 "$tidal" export --format hf --max-shard-gb 0.00003 "$dir/ck" "$dir/hf" > "$dir/export.log" 2>&1 ||
  { cat "$dir/export.log"; echo "FAIL: export"; exit 1; }
cat "$dir/export.log"
shards=$(ls "$dir/hf"/model-*-of-*.safetensors | wc -l)
[ "$shards" -ge 3 ] && [ -f "$dir/hf/model.safetensors.index.json" ] ||
  { ls "$dir/hf"; echo "FAIL: $shards shards (want 3 or more) and an index"; exit 1; }
grep -q "the largest tensor" "$dir/export.log" || { echo "FAIL: the export does not report its memory"; exit 1; }

# generate() from the export (from_pretrained reads the index), against tidal sample of the checkpoint.
"$py" - "$dir/in.safetensors" "$prompt" "$tokens" <<'EOF'
import sys
import torch
from safetensors.torch import save_file
ids = [int(x) for x in sys.argv[2].split()]
save_file({"prompt": torch.tensor([ids], dtype=torch.int32)}, sys.argv[1], metadata={"tokens": sys.argv[3]})
EOF
"$py" "$ref" generate "$dir/hf" "$dir/in.safetensors" "$dir/out.safetensors"
hf_ids=$("$py" - "$dir/out.safetensors" "$(wc -w <<<"$prompt")" <<'EOF'
import sys
from safetensors.torch import load_file
ids = load_file(sys.argv[1])["ids"][0].tolist()
print(" ".join(str(i) for i in ids[int(sys.argv[2]):]))
EOF
)
ck_ids=$("$tidal" sample "$dir/ck" --prompt-ids "$prompt" --tokens "$tokens" --temperature 0 --print-ids | tail -n 1)
if [[ "$ck_ids" != "$hf_ids" ]]; then
  echo "FAIL: tidal sample of the checkpoint differs from generate() of its export"
  echo "  hugging face: $hf_ids"
  echo "  tidal:        $ck_ids"
  exit 1
fi
echo "PASS: a checkpoint of 4 rank files exported in $shards shards by 2 ranks; from_pretrained's generate() equals tidal sample: $ck_ids"
