#!/usr/bin/env bash
# The README's fine-tuning walk-through, end to end: tokenize a text, start from a GPT-2-format
# Hugging Face directory, train, sample, export (and open the export with transformers).
#   scripts/finetune-demo.sh [GPT2_DIR [TEXT]]
# GPT2_DIR: a GPT2LMHeadModel directory with its tokenizer.json (save_pretrained of "gpt2" where you
# have the hub). Without one, a stand-in is made here: a small GPT-2-format directory (random
# weights, transformers' GPT2LMHeadModel) and a byte-level BPE trained on the text with `tokenizers`
# (both from the oracle venv, scripts/oracle-venv.sh). TEXT: any UTF-8 text of 1 MB or more;
# without one, 2 MB of Python's standard library sources. Work goes to demo/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
tidal=build/src/tidal
[ -x "$tidal" ] || scripts/build.sh
scripts/oracle-venv.sh
py="${TIDAL_ORACLE_VENV:-$HOME/.cache/tidal/oracle-venv}/bin/python"
work=demo
mkdir -p "$work/data"
gpt2=${1:-} text=${2:-}
if [ -z "$text" ]; then
  text=$work/python-stdlib.txt
  (set +o pipefail; find /usr/lib/python3*/ -maxdepth 1 -name '*.py' | sort | xargs cat 2>/dev/null | head -c 2000000) > "$text"
fi
echo "text: $text ($(du -h "$text" | cut -f1))"
steps=300 extra=()
if [ -z "$gpt2" ]; then
  gpt2=$work/gpt2-standin
  echo "no GPT-2 directory given: making a stand-in in $gpt2"
  "$py" - "$text" "$gpt2" <<'PY'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import GPT2Config, GPT2LMHeadModel
text, out = sys.argv[1], sys.argv[2]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([text], trainers.BpeTrainer(vocab_size=4096, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
cfg = GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=256, n_embd=256, n_layer=4, n_head=4)
GPT2LMHeadModel(cfg).save_pretrained(out)
tok.save(out + "/tokenizer.json")
PY
  extra=(--set train.lr=1e-3 --set train.min_lr=1e-4)  # from random weights: pre-training's rates
fi
echo "== 1. tokenize"
"$tidal" tokenize --tokenizer "$gpt2/tokenizer.json" -o "$work/data/train.bin" "$text"
echo "== 2. train from $gpt2"
rm -rf "$work/ckpt"
"$tidal" train -c configs/finetune-gpt2.toml --set model.init_from="$gpt2" --set data.path="$work/data/train.bin" \
  --set data.tokenizer="$gpt2/tokenizer.json" --set checkpoint.dir="$work/ckpt" --set train.steps=$steps \
  --set train.sample_prompt="def " "${extra[@]}"
echo "== 3. sample"
"$tidal" sample "$work/ckpt" --tokenizer "$gpt2/tokenizer.json" --prompt "def " --tokens 80 --temperature 0.8 \
  --top-k 40 --seed 1
echo
echo "== 4. export"
rm -rf "$work/export"
"$tidal" export --format hf "$work/ckpt" "$work/export"
"$py" -c "
from transformers import GPT2LMHeadModel
m = GPT2LMHeadModel.from_pretrained('$work/export')
print('transformers opened $work/export:', type(m).__name__, sum(p.numel() for p in m.parameters()), 'parameters')"
