#!/usr/bin/env bash
# `tidal sample` against Hugging Face's generate(): random GPT-2, Llama, Qwen2 (grouped-query),
# Mixtral and Qwen2-MoE
# directories with sharpened logits (no near-ties), greedy decoding of 40 tokens after a prompt,
# the ids compared token for token: prompts as ids, and as text through a tokenizer.json trained
# with `tokenizers`. Then the errors: a
# BERT directory, and --prompt without --tokenizer, each exit 2 with a message naming what is wrong.
# Exit 1 on any failure, printing both id lists for a mismatch.
# usage: check_sample.sh path/to/tidal path/to/oracle-venv/python path/to/hf_reference.py
set -u
tidal=$1 py=$2 ref=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
tokens=40

# greedy <name> <model dir> <prompt ids> <tidal's prompt arguments...>: HF's generate() from the
# ids and tidal sample, the new ids compared. tidal's stdout is left in $out.
greedy() {
  local name=$1 model=$2 prompt=$3
  shift 3
  "$py" - "$dir/in.safetensors" "$prompt" "$tokens" <<'EOF' || { echo "FAIL $name: writing the prompt"; exit 1; }
import sys
import torch
from safetensors.torch import save_file
ids = [int(x) for x in sys.argv[2].split()]
save_file({"prompt": torch.tensor([ids], dtype=torch.int32)}, sys.argv[1], metadata={"tokens": sys.argv[3]})
EOF
  "$py" "$ref" generate "$model" "$dir/in.safetensors" "$dir/out.safetensors" ||
    { echo "FAIL $name: hf_reference.py generate"; exit 1; }
  # The new ids only: generate() returns the prompt and what follows.
  local hf_ids tidal_ids rc
  hf_ids=$("$py" - "$dir/out.safetensors" "$(wc -w <<<"$prompt")" <<'EOF'
import sys
from safetensors.torch import load_file
ids = load_file(sys.argv[1])["ids"][0].tolist()
print(" ".join(str(i) for i in ids[int(sys.argv[2]):]))
EOF
  )
  out=$(timeout 300 "$tidal" sample "$model" "$@" --tokens "$tokens" --temperature 0 --print-ids 2>"$dir/stderr")
  rc=$?
  cat "$dir/stderr"
  tidal_ids=$(tail -n 1 <<<"$out")
  if [[ $rc -ne 0 ]]; then
    echo "FAIL $name: tidal sample exited $rc"; failures=$((failures + 1))
  elif [[ "$tidal_ids" != "$hf_ids" ]]; then
    echo "FAIL $name: the generated ids differ"
    echo "  hugging face: $hf_ids"
    echo "  tidal:        $tidal_ids"
    failures=$((failures + 1))
  else
    echo "ok   $name: $tokens tokens identical to Hugging Face's generate(): $tidal_ids"
  fi
}

# sharpen <model dir>: the final norm's scale (and shift) times 8, so the logits are 8 times
# further apart.
sharpen() {
  "$py" - "$1/model.safetensors" <<'EOF' || { echo "FAIL: sharpening the final norm of $1"; exit 1; }
import sys
from safetensors import safe_open
from safetensors.torch import load_file, save_file
tensors = load_file(sys.argv[1])
with safe_open(sys.argv[1], "pt") as f:
    meta = f.metadata()
for name in ("transformer.ln_f.weight", "transformer.ln_f.bias", "model.norm.weight"):
    if name in tensors:
        tensors[name] = tensors[name] * 8.0
save_file(tensors, sys.argv[1], metadata=meta)
EOF
}

"$py" "$ref" make gpt2 "$dir/peaked" n_layer=2 n_head=4 n_embd=64 vocab_size=211 n_positions=64 seed=3 peaked=1 ||
  { echo "FAIL: hf_reference.py make gpt2"; exit 1; }
greedy peaked "$dir/peaked" "5 17 42 101 7 199 3" --prompt-ids "5 17 42 101 7 199 3"

# peaked=1 sharpens the tied table itself, so the residual stream's own token wins and greedy
# decoding repeats the prompt's last token. A second model sharpens the logits at ln_f instead (its
# scale and shift times 8: gaps between the best tokens far above fp32's differences), and its text
# varies; it also has the other GELU (erf) and an untied head (lm_head.weight).
"$py" "$ref" make gpt2 "$dir/sharp" n_layer=2 n_head=4 n_embd=64 vocab_size=211 n_positions=64 seed=5 \
  activation_function=gelu tie_word_embeddings=false || { echo "FAIL: hf_reference.py make gpt2"; exit 1; }
sharpen "$dir/sharp"
greedy sharp "$dir/sharp" "5 17 42 101 7 199 3" --prompt-ids "5 17 42 101 7 199 3"
greedy sharp-short-prompt "$dir/sharp" "1 2 3" --prompt-ids "1,2,3"

# Llama: rotary positions, 4 query heads over 2 key / value heads, SwiGLU, an untied head.
"$py" "$ref" make llama "$dir/llama" num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 hidden_size=64 \
  intermediate_size=96 vocab_size=211 max_position_embeddings=64 rope_theta=500.0 seed=9 ||
  { echo "FAIL: hf_reference.py make llama"; exit 1; }
sharpen "$dir/llama"
greedy llama "$dir/llama" "5 17 42 101 7 199 3" --prompt-ids "5 17 42 101 7 199 3"

# Qwen2: the Llama shape with biases on q, k and v (Qwen2ForCausalLM).
"$py" "$ref" make qwen2 "$dir/qwen2" num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 hidden_size=64 \
  intermediate_size=96 vocab_size=211 max_position_embeddings=64 rope_theta=500.0 seed=13 ||
  { echo "FAIL: hf_reference.py make qwen2"; exit 1; }
sharpen "$dir/qwen2"
greedy qwen2 "$dir/qwen2" "5 17 42 101 7 199 3" --prompt-ids "5 17 42 101 7 199 3"

# Mixtral and Qwen2-MoE: each position's tokens routed to their top experts (Qwen2-MoE's weights
# not renormalized, its shared expert behind a sigmoid gate).
"$py" "$ref" make mixtral "$dir/mixtral" num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 \
  hidden_size=64 intermediate_size=96 vocab_size=211 max_position_embeddings=64 rope_theta=500.0 num_local_experts=4 \
  num_experts_per_tok=2 seed=23 || { echo "FAIL: hf_reference.py make mixtral"; exit 1; }
sharpen "$dir/mixtral"
greedy mixtral "$dir/mixtral" "5 17 42 101 7 199 3" --prompt-ids "5 17 42 101 7 199 3"
"$py" "$ref" make qwen2_moe "$dir/qwen2_moe" num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 \
  hidden_size=64 intermediate_size=96 vocab_size=211 max_position_embeddings=64 rope_theta=500.0 num_experts=6 \
  num_experts_per_tok=3 moe_intermediate_size=48 shared_expert_intermediate_size=64 seed=17 ||
  { echo "FAIL: hf_reference.py make qwen2_moe"; exit 1; }
sharpen "$dir/qwen2_moe"
greedy qwen2_moe "$dir/qwen2_moe" "5 17 42 101 7 199 3" --prompt-ids "5 17 42 101 7 199 3"

# The fine-tuning round trip through the command line: that Llama directory -> model.init_from ->
# tidal train 10 steps -> tidal export -> from_pretrained: HF's generate() from the export equals
# tidal sample from the export and from the checkpoint, token for token.
if timeout 300 "$tidal" train --set model.init_from="$dir/llama" --set train.steps=10 --set train.batch_size=4 \
     --set model.seq_len=32 --set train.lr=1e-4 --set train.min_lr=1e-5 --set train.warmup_steps=2 \
     --set train.eval_every=0 --set train.eval_batches=1 --set checkpoint.dir="$dir/llama-ck" > "$dir/train.log" 2>&1 &&
   timeout 120 "$tidal" export --format hf "$dir/llama-ck" "$dir/llama-out" > "$dir/export.log" 2>&1; then
  greedy llama-trained-export "$dir/llama-out" "5 17 42 101 7 199 3" --prompt-ids "5 17 42 101 7 199 3"
  export_ids=$(tail -n 1 <<<"$out")  # equal to generate()'s from the export when that passed
  ck_ids=$(timeout 300 "$tidal" sample "$dir/llama-ck" --prompt-ids "5 17 42 101 7 199 3" --tokens "$tokens" \
    --temperature 0 --print-ids 2>/dev/null | tail -n 1)
  if [[ -z "$ck_ids" || "$ck_ids" != "$export_ids" ]]; then
    echo "FAIL llama-trained: tidal sample of the checkpoint differs from that of its export"
    echo "  export:     $export_ids"
    echo "  checkpoint: $ck_ids"
    failures=$((failures + 1))
  else
    echo "ok   llama-trained: the checkpoint's samples equal generate() of its export: $ck_ids"
  fi
else
  cat "$dir/train.log" "$dir/export.log"; echo "FAIL llama-trained: training or export failed"; failures=$((failures + 1))
fi

# Text: a byte-level BPE tokenizer.json of 300 tokens (trained with `tokenizers`) encodes --prompt
# and decodes the output. tidal's ids equal generate()'s from the `tokenizers` encoding of the
# prompt, and the text printed starts with the prompt.
"$py" "$ref" make gpt2 "$dir/text" n_layer=2 n_head=4 n_embd=64 vocab_size=300 n_positions=64 seed=7 ||
  { echo "FAIL: hf_reference.py make gpt2"; exit 1; }
sharpen "$dir/text"
text_prompt="the cat sat on the mat"
text_ids=$("$py" - "$dir/tokenizer.json" "$text_prompt" <<'EOF'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
words = "the cat sat on a mat and the dog ran to the hat of that man in the sun".split()
tok.train_from_iterator([" ".join(words[(7 * i) % len(words):] + words[:(7 * i) % len(words)]) for i in range(200)], trainer)
tok.save(sys.argv[1])
print(" ".join(str(i) for i in tok.encode(sys.argv[2]).ids))
EOF
) || { echo "FAIL: training the tokenizer"; exit 1; }
greedy text "$dir/text" "$text_ids" --tokenizer "$dir/tokenizer.json" --prompt "$text_prompt"
if [[ $out != "$text_prompt"* ]]; then
  echo "FAIL text: the output does not start with the prompt: '$out'"; failures=$((failures + 1))
fi

# expect_error <name> <text the message must contain> -- <tidal arguments...>
expect_error() {
  local name=$1 want=$2
  shift 3
  local msg rc
  msg=$(timeout 120 "$tidal" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 || $msg != *"$want"* ]]; then
    echo "FAIL $name: exit $rc (want 2), message '$msg' (want it to contain '$want')"; failures=$((failures + 1))
  else
    echo "ok   $name: $msg"
  fi
}

"$py" "$ref" make bert "$dir/bert" num_hidden_layers=1 num_attention_heads=2 hidden_size=16 intermediate_size=64 \
  vocab_size=50 || { echo "FAIL: hf_reference.py make bert"; exit 1; }
expect_error bert "GPT" -- sample "$dir/bert" --prompt-ids "1 2"
expect_error prompt-without-tokenizer "--tokenizer" -- sample "$dir/peaked" --prompt "hello"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
