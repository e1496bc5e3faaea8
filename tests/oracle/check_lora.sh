#!/usr/bin/env bash
# LoRA from the command line, against Hugging Face PEFT: a random Llama (grouped-query, its final
# norm sharpened so greedy decoding has no near-ties) and PEFT adapters on it -> `tidal train` with
# model.init_from, finetune.method = "lora", finetune.adapters_from, 6 steps with a checkpoint ->
# `tidal export --format peft` and `--merge`. Greedy decoding of 30 tokens is then the same ids
# three ways: PeftModel.from_pretrained(base, the export).generate(), the merged export's
# generate(), and `tidal sample` of the checkpoint. The checkpoint holds the adapters alone, and
# their optimizer state is 12 bytes an adapter parameter; a run stopped and resumed from it gives
# the straight run's losses bitwise. Then the errors (exit 2): --format hf
# without --merge, --format peft of a full run, adapters of another rank.
# usage: check_lora.sh path/to/tidal path/to/oracle-venv/python path/to/hf_reference.py
set -u
tidal=$1 py=$2 ref=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
tokens=30
prompt="5 17 42 101 7 199 3"
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

"$py" "$ref" make llama "$dir/base" num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 hidden_size=64 \
  intermediate_size=96 vocab_size=211 max_position_embeddings=64 rope_theta=500.0 seed=9 || { echo "FAIL: making the base"; exit 1; }
"$py" - "$dir/base/model.safetensors" <<'EOF' || { echo "FAIL: sharpening the base"; exit 1; }
import sys
from safetensors import safe_open
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1])
with safe_open(sys.argv[1], "pt") as f:
    meta = f.metadata()
t["model.norm.weight"] = t["model.norm.weight"] * 8.0
save_file(t, sys.argv[1], metadata=meta)
EOF
"$py" "$ref" lora-make "$dir/base" "$dir/start" r=4 alpha=8 targets=q_proj,v_proj,down_proj seed=42 ||
  { echo "FAIL: making the adapters"; exit 1; }

lora=(--set model.init_from="$dir/base" --set model.seq_len=32 --set finetune.method=lora --set finetune.lora_rank=4
      --set finetune.lora_alpha=8 --set finetune.lora_targets=q_proj,v_proj,down_proj --set train.batch_size=4
      --set train.lr=1e-3 --set train.warmup_steps=0 --set train.eval_every=0)
if ! "$tidal" train "${lora[@]}" --set finetune.adapters_from="$dir/start" --set train.steps=6 \
     --set checkpoint.dir="$dir/ckpt" --metrics "$dir/metrics.jsonl" >"$dir/train.log" 2>&1; then
  cat "$dir/train.log"; echo "FAIL: tidal train with LoRA"; exit 1
fi
# Stopped after step 3 and resumed (the base from model.init_from again, the adapters and their
# optimizer state from the checkpoint): the same losses as the straight run, bitwise.
"$tidal" train "${lora[@]}" --set finetune.adapters_from="$dir/start" --set train.steps=6 --stop-after 3 \
  --set checkpoint.dir="$dir/part" --metrics "$dir/part.jsonl" >"$dir/part.log" 2>&1 || { cat "$dir/part.log"; fail "the first half"; }
"$tidal" train "${lora[@]}" --set finetune.adapters_from="$dir/start" --set train.steps=6 --resume "$dir/part" \
  --set checkpoint.dir="$dir/part" --metrics "$dir/part.jsonl" >"$dir/resume.log" 2>&1 || { cat "$dir/resume.log"; fail "the resume"; }
"$py" - "$dir/metrics.jsonl" "$dir/part.jsonl" <<'EOF' || fail "resumed losses"
import json, sys
losses = lambda f: [(r["step"], r["loss"]) for r in map(json.loads, open(f)) if "loss" in r and not r.get("summary")]
straight, parts = losses(sys.argv[1]), losses(sys.argv[2])
assert straight == parts, f"straight {straight}\nstopped and resumed {parts}"
print("ok   stopped after step 3 and resumed: the 6 losses bitwise the straight run's")
EOF
# Every adapter tensor in the checkpoint, nothing of the base; 12 B of optimizer state each.
"$py" - "$dir/ckpt" "$dir/metrics.jsonl" <<'EOF' || fail "the checkpoint's tensors or the metrics"
import json, os, sys
from safetensors import safe_open
step = os.path.join(sys.argv[1], open(os.path.join(sys.argv[1], "latest")).read().strip())
names, params = set(), 0
for f in os.listdir(step):
    if f.endswith(".safetensors"):
        with safe_open(os.path.join(step, f), "pt") as st:
            names |= set(st.keys())
weights = sorted(n for n in names if not n.startswith(("m.", "v.")) and ".lora." in n)
others = sorted(n for n in names if ".lora." not in n)
assert len(weights) == 2 * 2 * 3, weights  # A and B of 3 targets in 2 layers
assert not others, others
record = [json.loads(l) for l in open(sys.argv[2])][-1]
trained = record["parameters_trained"]
assert trained == 2 * (4 * 64 + 64 * 4 + 4 * 64 + 32 * 4 + 4 * 96 + 64 * 4), trained
assert record["optimizer_state_bytes"] == 12 * trained, record["optimizer_state_bytes"]
print(f"ok   the checkpoint holds the {len(weights)} adapter tensors alone; optimizer state "
      f"{record['optimizer_state_bytes']} B = 12 B x {trained} adapter parameters")
EOF

"$tidal" export --format peft "$dir/ckpt" "$dir/peft" >"$dir/export.log" 2>&1 || { cat "$dir/export.log"; fail "export --format peft"; }
"$tidal" export --merge "$dir/ckpt" "$dir/merged" >"$dir/merge.log" 2>&1 || { cat "$dir/merge.log"; fail "export --merge"; }

"$py" - "$dir/in.safetensors" "$prompt" "$tokens" <<'EOF'
import sys
import torch
from safetensors.torch import save_file
ids = [int(x) for x in sys.argv[2].split()]
save_file({"prompt": torch.tensor([ids], dtype=torch.int32)}, sys.argv[1], metadata={"tokens": sys.argv[3]})
EOF
new_ids() {  # the ids generate() wrote after the prompt
  "$py" - "$1" "$(wc -w <<<"$prompt")" <<'EOF'
import sys
from safetensors.torch import load_file
print(" ".join(str(i) for i in load_file(sys.argv[1])["ids"][0].tolist()[int(sys.argv[2]):]))
EOF
}
"$py" "$ref" lora-generate "$dir/base" "$dir/peft" "$dir/in.safetensors" "$dir/peft.safetensors" || fail "PEFT's generate"
"$py" "$ref" generate "$dir/merged" "$dir/in.safetensors" "$dir/merged.safetensors" || fail "the merged model's generate"
peft_ids=$(new_ids "$dir/peft.safetensors")
merged_ids=$(new_ids "$dir/merged.safetensors")
tidal_ids=$("$tidal" sample "$dir/ckpt" --prompt-ids "$prompt" --tokens "$tokens" --temperature 0 --print-ids 2>/dev/null | tail -n 1)
if [[ -z "$peft_ids" || "$peft_ids" != "$tidal_ids" || "$merged_ids" != "$tidal_ids" ]]; then
  fail "greedy decoding differs"
  echo "  peft:   $peft_ids"; echo "  merged: $merged_ids"; echo "  tidal:  $tidal_ids"
else
  echo "ok   $tokens greedy tokens the same from PEFT's adapters, the merged export and tidal sample: $tidal_ids"
fi

# expect_error <name> <text in the message> <command...>: exit 2 with the message.
expect_error() {
  local name=$1 text=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne 2 || "$out" != *"$text"* ]]; then
    fail "$name: exit $rc, expected 2 and '$text' in: $out"
  else
    echo "ok   $name: exit 2: $(tail -n 1 <<<"$out")"
  fi
}
expect_error "hf export of adapters" "--format peft" "$tidal" export "$dir/ckpt" "$dir/x"
"$tidal" train --set model.type=llama --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
  --set model.vocab_size=64 --set model.seq_len=16 --set train.steps=1 --set checkpoint.dir="$dir/full" >/dev/null 2>&1 ||
  fail "a full run to export"
expect_error "peft export of a full run" "no adapters" "$tidal" export --format peft "$dir/full" "$dir/y"
expect_error "adapters of another rank" "finetune.lora_rank = 4" "$tidal" train "${lora[@]}" \
  --set finetune.lora_rank=8 --set finetune.adapters_from="$dir/start" --set train.steps=1

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "all LoRA command-line checks passed"
