#!/usr/bin/env bash
# Bad configs exit with code 2 and one line naming the key or file; none crashes or hangs.
# usage: check_errors.sh path/to/tidal
set -u
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

# expect <name> <text the message must contain> -- <tidal arguments...>
expect() {
  local name=$1 want=$2
  shift 3
  local out rc
  out=$(timeout 60 "$tidal" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 ]]; then
    echo "FAIL $name: exit $rc (want 2): $out"; failures=$((failures + 1)); return
  fi
  if [[ $(printf '%s\n' "$out" | wc -l) -ne 1 || $out != *"$want"* ]]; then
    echo "FAIL $name: message '$out' should be one line containing '$want'"; failures=$((failures + 1)); return
  fi
  echo "ok   $name: $out"
}

printf '[train]\nstpes = 10\n' > "$dir/unknown.toml"
printf '[train]\nsteps = "ten"\n' > "$dir/type.toml"
printf '[model]\nn_embd = 100\nn_head = 3\n' > "$dir/divisible.toml"
printf '[data]\nkind = "tokens"\npath = "%s/missing.bin"\n' "$dir" > "$dir/missing.toml"
printf '[parallel]\ndata = 4\n' > "$dir/ranks.toml"
printf '[model\nn_layer = 2\n' > "$dir/syntax.toml"

expect unknown-key "train.stpes" -- train -c "$dir/unknown.toml"
expect wrong-type "train.steps must be an integer" -- train -c "$dir/type.toml"
expect not-divisible "model.n_embd (100) must be divisible by model.n_head (3)" -- train -c "$dir/divisible.toml"
expect missing-data "missing.bin" -- train -c "$dir/missing.toml"
expect qwen2-output-bias "model.attention_bias is Llama's switch" -- train --set model.type=qwen2 \
  --set model.attention_bias=true
expect rank-mismatch "launched" -- train -c "$dir/ranks.toml"
expect missing-config "nope.toml" -- train -c "$dir/nope.toml"
expect toml-syntax "syntax.toml:1" -- train -c "$dir/syntax.toml"
expect bad-set-value "train.lr must be a number" -- train --set train.lr=fast
expect lr-inf "train.lr must be a finite number, got inf" -- train --set train.lr=inf
expect dropout-nan "model.dropout must be a finite number, got nan" -- train --set model.dropout=nan
printf '[train]\nbeta2 = -inf\n' > "$dir/inf.toml"
expect float-inf-file "inf.toml:2: train.beta2 must be a finite number, got -inf" -- train -c "$dir/inf.toml"
expect weight-decay-negative "train.weight_decay must be >= 0, got -0.1" -- train --set train.weight_decay=-0.1
expect on-nonfinite "train.on_nonfinite = \"ignore\" is not one of stop | skip" -- train --set train.on_nonfinite=ignore
expect unknown-set-key "model.layers" -- train --set model.layers=3
expect offload-without-cap "needs memory.device_limit on a machine without a GPU" -- train --set memory.offload=chunk
expect offload-too-small "is too small for this run: the warm-up iteration traced" -- \
  train --set memory.offload=chunk --set memory.device_limit=200KiB --set train.steps=2
expect device-unknown 'train.device = "gpu" is not one of cpu | cuda' -- train --set train.device=gpu
# Where a GPU is visible this trains instead: only a machine without one checks the message.
if ! "$tidal" info | grep -q "train.device=cuda"; then
  expect device-cuda-without-gpu 'train.device = "cuda", but this process sees no GPU' -- \
    train --set train.device=cuda --set train.steps=1
fi
expect embedding-on-host-without-offload "set memory.offload to \"chunk\" or \"static\"" -- \
  train --set memory.embedding_on_host=true --set model.tie_embeddings=false
expect embedding-on-host-tied "set model.tie_embeddings = false" -- \
  train --set memory.embedding_on_host=true --set memory.offload=chunk --set memory.device_limit=64MiB
expect untied-vit "model.tie_embeddings" -- train --set model.type=vit --set data.kind=images --set model.tie_embeddings=false
expect host-limit-without-offload "memory.host_limit caps the chunks the host holds beside a device tier" -- \
  train --set memory.host_limit=1GiB
expect host-too-small "memory.host_limit = 1048576 bytes (0 in use) is too small" -- \
  train --set memory.offload=chunk --set memory.device_limit=64MiB --set memory.host_limit=1MiB
expect plan-without-caps "tidal plan fits a model under both memory caps" -- plan
expect plan-one-layer-too-big "even 1 layer of gpt" -- \
  plan --set memory.offload=chunk --set memory.device_limit=64MiB --set memory.host_limit=100KiB
expect chunk-search-below-largest "holds the largest parameter" -- chunk-search --from 10 --to 20
expect interleave-one-stage "interleaves the model chunks of several pipeline stages, and parallel.pipeline is 1" -- \
  train --set parallel.schedule=interleaved --set parallel.virtual_stages=2
expect zb-memory-below-1f1b "parallel.zb_memory = 0.5 is below 1F1B's own activation memory" -- \
  train --set parallel.zb_memory=0.5
expect bad-loss-scale "train.loss_scale must be > 0" -- train --set train.precision=fp16 --set train.loss_scale=0
expect cudnn-on-cpu 'train.attention = "cudnn" runs attention through cuDNN on a GPU' -- train --set train.attention=cudnn
expect bad-attention "train.attention" -- train --set train.attention=flash
expect fp8-on-cpu "train.precision = \"fp8\" runs the linear layers' products on a GPU" -- train --set train.precision=fp8
expect bad-size "memory.device_limit" -- train --set memory.device_limit=lots
expect bad-enum "model.type" -- train --set model.type=mamba
expect bad-flag "stop-after" -- train --stop-after -3
expect no-loss-blocks "train.loss_chunks must be >= 1" -- train --set train.loss_chunks=0
expect loss-blocks-of-images "classifies images, one row of logits per image: set train.loss_chunks = 1" -- train \
  --set model.type=vit --set data.kind=images --set train.loss_chunks=2
expect calibrate-alone "launch it with two ranks or more" -- calibrate --quick --out "$dir/hw.toml"
expect auto-alone "parallel.auto measures this machine over the launched ranks" -- train --set parallel.auto=true
expect auto-no-hardware-file "nope-hw.toml not found" -- train --set parallel.auto=true --set parallel.hardware="$dir/nope-hw.toml"
expect plan-explain-alone "--explain and --configured go with --world N" -- plan --explain
expect plan-world-zero "--world takes the number of ranks to plan for, 1 or more; got 0" -- plan --world 0
expect plan-no-layout "no layout of 3 ranks splits this model" -- plan --world 3 --set model.n_head=2 \
  --set model.n_embd=64 --set train.batch_size=4 --set model.n_layer=2
TIDAL_CPU_GEMM=fastest expect cpu-gemm-unknown "TIDAL_CPU_GEMM=fastest is not a CPU GEMM choice: use auto" -- \
  train --set train.steps=1
TIDAL_CPU_GEMM=mkl TIDAL_MKL_DIR="$dir/no-mkl" expect cpu-gemm-mkl-missing \
  "no $dir/no-mkl/libmkl_rt.so.3 (scripts/mkl.sh installs it" -- train --set train.steps=1
"$tidal" train --set train.steps=4 --set checkpoint.dir="$dir/ck" --stop-after 2 > /dev/null
expect stop-before-resume "--stop-after 1 is before step 2, where checkpoint" -- \
  train --set train.steps=4 --resume "$dir/ck" --stop-after 1

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "all error checks passed"
