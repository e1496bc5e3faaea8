#!/usr/bin/env bash
# On a machine with a GPU: the GPU tests (op parity against the CPU backend, the GPU's memory
# tiers, training on the GPU, the bf16 loss curve against the CPU's fp32, compute-sanitizer over a
# few attention cases) and the benchmarks (GPU micro-benchmarks; GPT-2 124M training beside PyTorch
# eager and torch.compile; offload under a device cap; GPT-2 1.5B; activation checkpointing's
# cost), in one command. Uses the bundle of scripts/gpu-bundle.sh (.gpu/tidal-gpu.tar.xz) when it is
# there (a GPU machine without tidal's build dependencies); otherwise builds with CUDA here and
# runs `ctest -L gpu`.
#
#   scripts/gpu-check.sh [tests] [training] [layouts] [sanitize] [ops] [train] [profile]
#                                                          (no argument: all, in that order)
#   scripts/gpu-check.sh partb     issue 64's Part B in its order, in one call of at most 8 minutes:
#                                  tests sanitize gpt2 fp8 largest grid multi
#   scripts/gpu-check.sh zb        issue 63's idle fractions on the machine's own CPU cores (below)
#
# tests: the GPU unit tests; training: training on the GPU against the CPU (tests/gpu/check_*);
# layouts: the parallel layouts with 2 to 8 ranks sharing the GPU against one GPU (mpirun);
# sanitize: compute-sanitizer; ops: the micro-benchmarks (and AdamW on the host's cores);
# train: the end-to-end benchmarks;
# profile: the GPT-2 124M step's time by op family, tidal beside PyTorch eager (bench/gpu_step_profile.py).
# gpt2: GPT-2 124M in bf16 beside PyTorch eager and torch.compile, and its step profile (B2);
# fp8: train.precision = "fp8" against bf16, 200 steps each (B3);
# largest: the largest model one H200 trains (configs/llama-h200-largest.toml, the planner's
# answer): without offload, offloaded without the disk, then with it, 3 steps each beside the
# plan's prediction (B4); grid: 2D, 2.5D and 3D against 1D on ranks sharing the GPU
# (bench/tensor_modes_speed.py, B5); multi: data 2 over NCCL and staged where there are two GPUs
# (B6; one GPU: reported not applicable).
# zb: not a GPU check: the zero-bubble schedules' idle time (issue 63, must-show 2) wants a core
# per stage, which the 2-core development machines lack and the GPU machine has: pipeline 4 on 4
# CPU ranks bound to cores, 8 micro-batches, one thread a rank, every schedule (each run's summary
# holds pipeline.idle_fraction and the step times).
#
# Every check and benchmark adds a JSON line to the report, gpu-check-logs/report.jsonl (and
# $OUT/report.jsonl after each): its name, PASS / FAIL / NOT-APPLICABLE / NOT-RUN, the
# seconds since the start, and the JSON lines its output printed (the benchmarks' figures, a
# run's metrics). GPU_CHECK_DEADLINE (seconds from the start, default 470 for partb, none
# otherwise): a check that would start after it is reported NOT-RUN and fails the run, and each
# check's time limit ends at it.
#
# The parts run in the order named. Naming parts lets a caller with a time limit per command split
# the run, or put first what matters most. Every program runs
# under a time limit (GPU_CHECK_TIMEOUT seconds, default 240; the unit tests GPU_TEST_TIMEOUT,
# default 120), so a hang costs one program, not the run. Logs go to gpu-check-logs/, one per
# program, written as it runs; when $OUT is set (the device tool's folder, which takes back only
# a few files) they are packed into $OUT/gpu-check-logs.tgz after every program, so a run cut
# short still returns what it logged.
# A check passes only when it ran on the GPU: the script fails when tidal sees no GPU, when a
# shared library is missing, and when any test was skipped. The tests run with
# CUDA_LAUNCH_BLOCKING=1, so an asynchronous fault is reported at the kernel that made it.
# GPU_BENCH_ARGS=--quick runs the benchmarks at their smallest sizes and fewest steps, and the
# 1.5B model in tidal alone (its MFU; torch.compile of 48 layers takes minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
parts=(${*:-tests training layouts sanitize ops train profile})
if [[ ${parts[*]} == partb ]]; then
  parts=(tests sanitize gpt2 fp8 largest grid multi)
  deadline=${GPU_CHECK_DEADLINE:-470}
else
  deadline=${GPU_CHECK_DEADLINE:-0}
fi
all_parts=" tests training layouts sanitize ops train profile gpt2 fp8 largest grid multi zb "
for part in "${parts[@]}"; do
  [[ $all_parts == *" $part "* ]] || { echo "gpu-check: no part '$part' ($all_parts, or partb)"; exit 2; }
done
logs=gpu-check-logs
rm -rf "$logs" && mkdir -p "$logs"
# Packs the logs so far into $OUT (when set).
save_logs() { [[ -n "${OUT:-}" ]] && tar czf "$OUT/gpu-check-logs.tgz" "$logs"; true; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$logs/gpu.txt"
failed=0
check_timeout=${GPU_CHECK_TIMEOUT:-240}
test_timeout=${GPU_TEST_TIMEOUT:-120}

# report NAME STATUS [FILE]: the report's line for a check (see the header), FILE's JSON lines as
# its figures.
report() {
  python3 - "$SECONDS" "$@" >> "$logs/report.jsonl" <<'PY'
import json, sys
elapsed, name, status = int(sys.argv[1]), sys.argv[2], sys.argv[3]
figures = []
if len(sys.argv) > 4:
    try:
        for line in open(sys.argv[4], errors="replace"):
            line = line.strip()
            if line.startswith("{"):
                try:
                    figures.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
print(json.dumps({"check": name, "status": status, "elapsed_s": elapsed, "figures": figures}))
PY
  [[ -n "${OUT:-}" ]] && cp "$logs/report.jsonl" "$OUT/report.jsonl"
  true
}

# limit: this check's time limit in seconds, the part's own or what is left before the deadline
# (0: past it).
limit() {
  local t=$check_timeout
  if (( deadline > 0 )); then
    local left=$(( deadline - SECONDS ))
    (( left < t )) && t=$left
    (( t < 0 )) && t=0
  fi
  echo "$t"
}

# check NAME COMMAND...: runs a check into $logs/NAME.log under the time limit, says PASS or
# FAIL (a skip is a failure here), shows the log's end.
check() {
  local name=$1 rc=0 t
  shift
  t=$(limit)
  if (( t == 0 )); then echo "FAIL $name (not run: past the deadline)"; failed=1; report "$name" NOT-RUN; return; fi
  timeout -k 10 "$t" "$@" > "$logs/$name.log" 2>&1 || rc=$?
  if (( rc == 124 || rc == 137 )); then
    echo "FAIL $name (timed out after $t s)"; failed=1; report "$name" FAIL "$logs/$name.log"
  elif (( rc == 77 )) || grep -q "SKIPPED\|^skipped" "$logs/$name.log"; then
    echo "FAIL $name (skipped: no GPU seen)"; failed=1; report "$name" FAIL "$logs/$name.log"
  elif (( rc != 0 )); then
    echo "FAIL $name (exit $rc)"; failed=1; report "$name" FAIL "$logs/$name.log"
  else
    echo "PASS $name"; report "$name" PASS "$logs/$name.log"
  fi
  tail -25 "$logs/$name.log"
  save_logs
}

# bench NAME COMMAND...: a benchmark, its whole output shown as it runs.
bench() {
  local name=$1 rc=0 t
  shift
  t=$(limit)
  if (( t == 0 )); then echo "FAIL $name (not run: past the deadline)"; failed=1; report "$name" NOT-RUN; return; fi
  timeout -k 10 "$t" "$@" 2>&1 | tee "$logs/$name.txt" || rc=$?
  if (( rc == 0 )); then
    report "$name" PASS "$logs/$name.txt"
  else
    echo "FAIL $name (exit $rc$( (( rc == 124 )) && echo ", timed out after $t s"))"; failed=1
    report "$name" FAIL "$logs/$name.txt"
  fi
  save_logs
}

if [[ -f .gpu/tidal-gpu.tar.xz ]]; then
  bundle=${TMPDIR:-/tmp}/tidal-gpu
  rm -rf "$bundle" && mkdir -p "$bundle/run"
  # Python's tarfile: no dependence on the machine having xz.
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .gpu/tidal-gpu.tar.xz "$bundle" ||
    { echo "FAIL unpacking .gpu/tidal-gpu.tar.xz"; exit 1; }
  # The bundle's libraries are for tidal's programs alone (PyTorch, in the same run, keeps its
  # own): each program is reached through a wrapper that sets the library path for it.
  # CUDA's own libraries are the machine's: where the toolkit's folder lacks one (cuBLASLt in a
  # pip wheel, say), the first copy found under /usr/local, /opt or /usr/lib is used.
  libs="$bundle/lib:/usr/local/cuda/lib64"
  not_found() { for p in "$bundle"/bin/*; do LD_LIBRARY_PATH=$libs ldd "$p"; done | awk '/not found/ {print $1}' | sort -u; }
  for name in $(not_found); do
    found=$(find /usr/local /opt /usr/lib -name "$name" -print -quit 2> /dev/null)
    [[ -n $found ]] && { libs="$libs:$(dirname "$found")"; echo "using $found"; }
  done
  # cuDNN is loaded at run time (attention: ops/cuda/cudnn_attention.h), so ldd does not name it:
  # PyTorch's nvidia-cudnn wheel's, or the first libcudnn.so.9 under /usr/local, /opt or /usr/lib.
  cudnn=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2> /dev/null)
  [[ -f $cudnn/libcudnn.so.9 ]] ||
    cudnn=$(dirname "$(find /usr/local /opt /usr/lib -name libcudnn.so.9 -print -quit 2> /dev/null)")
  if [[ -f $cudnn/libcudnn.so.9 ]]; then
    libs="$libs:$cudnn"; echo "cuDNN: $cudnn"
  else
    echo "FAIL cuDNN: no libcudnn.so.9 here, so attention runs on tidal's own kernels"; failed=1
  fi
  for p in "$bundle"/bin/*; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$libs" "$p" \
      > "$bundle/run/$(basename "$p")"
    chmod +x "$bundle/run/$(basename "$p")"
  done
  missing=$(for p in "$bundle"/bin/*; do LD_LIBRARY_PATH=$libs ldd "$p" | sed "s|^|$(basename "$p"): |"; done |
            grep "not found" | sort -u)
  if [[ -n $missing ]]; then
    echo "FAIL shared libraries not found:"; echo "$missing"
    echo "$missing" > "$logs/ldd.txt"; save_logs; exit 1
  fi
  tidal=$bundle/run/tidal
  bench_ops=$bundle/run/bench_gpu_ops
  cpu_adam=$bundle/run/bench_cpu_adam
  tests=("$bundle"/run/test_cuda_*)
else
  scripts/build.sh -DTIDAL_CUDA=ON > "$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; save_logs; exit 1; }
  tidal=$PWD/build/src/tidal
  bench_ops=$PWD/build/bench/bench_gpu_ops
  cpu_adam=$PWD/build/bench/bench_cpu_adam
  tests=()
fi
"$tidal" info 2>&1 | tee "$logs/info.txt"
if ! grep -q "train.device=cuda" "$logs/info.txt"; then
  echo "FAIL tidal sees no GPU (above): every GPU check would skip"; save_logs; exit 1
fi

part_tests() {
  export CUDA_LAUNCH_BLOCKING=1
  if (( ${#tests[@]} )); then
    saved_timeout=$check_timeout check_timeout=$test_timeout
    for t in "${tests[@]}"; do
      check "$(basename "$t")" "$t" --gtest_brief=1
      grep -E "FAILED|Failure|Expected|Which is|worst" "$logs/$(basename "$t").log" | head -40
    done
    check_timeout=$saved_timeout
  else
    check ctest-gpu bash -c "cd build && ctest -L gpu --output-on-failure"
  fi
  unset CUDA_LAUNCH_BLOCKING
}

part_training() {
  export CUDA_LAUNCH_BLOCKING=1
  check check_gpu_training bash tests/gpu/check_gpu_training.sh "$tidal"
  check check_gpu_loss_curve python3 tests/gpu/check_gpu_loss_curve.py "$tidal"
  unset CUDA_LAUNCH_BLOCKING
}

part_layouts() {
  command -v mpirun > /dev/null || { echo "FAIL layouts: mpirun is not on the PATH (Open MPI 4.1)"; failed=1; return; }
  check check_gpu_layouts bash tests/gpu/check_gpu_layouts.sh "$tidal" mpirun --allow-run-as-root --oversubscribe \
    --bind-to none
}

part_sanitize() {
  # A few attention cases (the flash kernels on tensor cores and SIMT, grouped heads, the ring's
  # pieces) under compute-sanitizer: out-of-bounds and misaligned accesses, then shared-memory races.
  attention=${tests[0]:-}; attention=${attention%/*}/test_cuda_attention
  [[ -x $attention ]] || attention=$PWD/build/tests/test_cuda_attention
  cases='*bf16_T129_hd64_causal_masked:*f32_T37_hd24_causal_masked:*bf16_T129_hd128_H8_kv2_causal_masked:CudaAttentionMasks.*:*B2T130H6kv2*'
  # And the kernels written since the last GPU run (2026-12-02: the split norms, the vocabulary
  # shards, the multi-tensor AdamW, the staged collectives' fenced copies, cuDNN's attention with
  # its head re-layout and document bias).
  local newer=(test_cuda_split_norm:'CudaSplitNorm.*' test_cuda_vocab_shards:'*'
               test_cuda_optim:'*AdamWStepsInOneLaunch*' test_cuda_core:'CudaCore.Fenced*:CudaCore.Staged*'
               test_cuda_attention:'*CudnnAttention*bf16_T37_hd64_H8_kv2_causal_documents')
  if command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
      check "sanitize_$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 "$attention" --gtest_filter="$cases"
      for entry in "${newer[@]}"; do
        local program=${attention%/*}/${entry%%:*}
        check "sanitize_${tool}_${entry%%:*}" compute-sanitizer --tool "$tool" --error-exitcode 1 "$program" \
          --gtest_filter="${entry#*:}"
      done
    done
  else
    echo "FAIL sanitize: compute-sanitizer is not on the PATH"; failed=1
  fi
}

part_ops() {
  bench bench_gpu_ops python3 bench/gpu_ops.py "$bench_ops" ${GPU_BENCH_ARGS:-}
  # AdamW on the host's cores (memory.offload's states there): 2 threads, one rank's share of 16
  # cores among 8 ranks, and every core; the hardware file's host.optimizer_gbps is 28 bytes a
  # parameter times params_per_s.
  bench bench_cpu_adam_host bash -c 'for t in 2 $(nproc); do OMP_NUM_THREADS=$t "$0" --numel 67108864 --steps 5; done' \
    "$cpu_adam"
}

part_train() {
  # Training end to end: tidal beside PyTorch (a system that fails to train fails the check).
  big_systems=tidal,eager,compile
  [[ " ${GPU_BENCH_ARGS:-} " == *" --quick "* ]] && big_systems=tidal
  bench bench_gpu_train_124m python3 bench/gpu_train.py --tidal "$tidal" --model 124m ${GPU_BENCH_ARGS:-}
  bench bench_gpu_offload python3 bench/gpu_offload.py --tidal "$tidal" ${GPU_BENCH_ARGS:-}
  bench bench_gpu_train_1.5b python3 bench/gpu_train.py --tidal "$tidal" --model 1.5b --systems "$big_systems" \
    ${GPU_BENCH_ARGS:-}
  bench bench_activation_checkpointing python3 bench/activation_checkpointing.py --tidal "$tidal" --device cuda \
    ${GPU_BENCH_ARGS:-}
}

part_profile() {
  bench gpu_step_profile python3 bench/gpu_step_profile.py --tidal "$tidal" --model 124m
}

part_gpt2() {
  # B2: GPT-2 124M in bf16 at T = 1024 beside PyTorch eager and torch.compile (tokens/s, MFU),
  # then the step by op family beside PyTorch's (the attention and optimizer rows).
  bench gpt2_124m python3 bench/gpu_train.py --tidal "$tidal" --model 124m --systems tidal,eager,compile
  bench gpt2_124m_profile python3 bench/gpu_step_profile.py --tidal "$tidal" --model 124m
}

part_fp8() {
  # B3: train.precision = "fp8" against bf16, tidal alone, 200 steps each: tokens/s and the loss
  # after 200 steps (each run's final_loss). GPT-2 124M, the size this call's minutes allow
  # (B3 asks for 1.5B where the time allows: GPU_FP8_MODEL=1.5b).
  for p in bf16 fp8; do
    bench "fp8_${p}" python3 bench/gpu_train.py --tidal "$tidal" --model "${GPU_FP8_MODEL:-124m}" --systems tidal \
      --precision "$p" --steps 200
  done
}

part_largest() {
  # B4: the planner's largest model for this machine (configs/llama-h200-largest.toml), 3 steps
  # each: first without offload (26 layers fit the device alone), then offloaded without the
  # disk (24 layers), then the pick itself with the disk (34 layers; its disk traffic, 46 GiB each
  # way a step, makes it last). Each beside `tidal plan --world 1 --configured`'s prediction.
  local cfg=configs/llama-h200-largest.toml hw=configs/hardware/h200-1x.toml
  mkdir -p /tmp/tidal-disk
  local -A variants=(
    [no_offload]="--set memory.offload=none --set memory.host_limit= --set memory.disk_dir= --set memory.disk_limit= --set model.n_layer=26"
    [offload_no_disk]="--set memory.disk_dir= --set memory.disk_limit= --set model.n_layer=24"
    [offload_disk]="")
  "$tidal" plan -c "$cfg" --hardware "$hw" --json > "$logs/largest_plan.json" 2>&1
  report largest_plan "$( [[ -s $logs/largest_plan.json ]] && echo PASS || echo FAIL)" "$logs/largest_plan.json"
  for v in no_offload offload_no_disk offload_disk; do
    # shellcheck disable=SC2086
    "$tidal" plan -c "$cfg" --world 1 --hardware "$hw" --configured --json ${variants[$v]} \
      > "$logs/largest_${v}_predicted.json" 2>&1
    report "largest_${v}_predicted" PASS "$logs/largest_${v}_predicted.json"
    # shellcheck disable=SC2086
    check "largest_$v" "$tidal" train -c "$cfg" ${variants[$v]} --set train.steps=3 \
      --metrics "$logs/largest_$v.jsonl"
    report "largest_${v}_metrics" "$( [[ -s $logs/largest_$v.jsonl ]] && echo PASS || echo FAIL)" \
      "$logs/largest_$v.jsonl"
  done
}

part_grid() {
  # B5: 2D, 2.5D and 3D against 1D on ranks sharing the GPU (the host loops gone): at most 1.5x.
  command -v mpirun > /dev/null || { echo "FAIL grid: mpirun is not on the PATH"; failed=1; report grid FAIL; return; }
  bench grid_speed python3 bench/tensor_modes_speed.py --tidal "$tidal" --device cuda
}

part_multi() {
  # B6: where the machine has two or more GPUs, data 2 over NCCL and staged, losses equal.
  local gpus
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
  if (( gpus < 2 )); then
    echo "multi: $gpus GPU here: data 2 over NCCL needs two (not applicable)"
    report multi NOT-APPLICABLE
    return
  fi
  local gpt=(--set train.device=cuda --set parallel.data=2 --set train.steps=20 --set model.n_layer=4
             --set model.n_embd=256 --set model.n_head=4 --set train.batch_size=16)
  for how in nccl staged; do
    check "multi_$how" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$tidal" train "${gpt[@]}" \
      --set parallel.gpu_collectives=$how --metrics "$logs/multi_$how.jsonl"
    report "multi_${how}_metrics" PASS "$logs/multi_$how.jsonl"
  done
}

part_zb() {
  command -v mpirun > /dev/null || { echo "FAIL zb: mpirun is not on the PATH"; failed=1; report zb FAIL; return; }
  local gpt=(--set train.device=cpu --set parallel.pipeline=4 --set model.n_layer=8 --set model.n_embd=256
             --set model.n_head=4 --set model.seq_len=128 --set model.vocab_size=512 --set train.batch_size=16
             --set train.micro_batch_size=2 --set train.steps=12 --set train.eval_every=0 --set train.eval_batches=1)
  local -A schedules=([gpipe]="gpipe" [1f1b]="1f1b" [interleaved]="interleaved --set parallel.virtual_stages=2"
                      [zb_h1]="zb-h1" [zb_v]="zb-v --set parallel.virtual_stages=2")
  for s in 1f1b zb_h1 zb_v interleaved gpipe; do
    # shellcheck disable=SC2086
    check "zb_$s" mpirun --allow-run-as-root --bind-to core --map-by core -np 4 -x OMP_NUM_THREADS=1 "$tidal" train \
      "${gpt[@]}" --set parallel.schedule=${schedules[$s]} --metrics "$logs/zb_$s.jsonl"
    report "zb_${s}_metrics" "$( [[ -s $logs/zb_$s.jsonl ]] && echo PASS || echo FAIL)" "$logs/zb_$s.jsonl"
  done
}

for part in "${parts[@]}"; do "part_$part"; done
(( failed )) && echo "gpu-check: FAILED (logs in $logs/)" || echo "gpu-check: all passed"
exit $failed
