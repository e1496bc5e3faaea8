#!/usr/bin/env bash
# On a machine with a GPU: the GPU tests (op parity against the CPU backend, the GPU's memory
# tiers, training on the GPU, the bf16 loss curve against the CPU's fp32) and the benchmarks (GPU
# micro-benchmarks; GPT-2 124M and 1.5B training beside PyTorch eager and torch.compile;
# activation checkpointing's cost), in one command. Uses the programs of scripts/gpu-bundle.sh in
# .gpu/ when they are there (a GPU machine without tidal's build dependencies); otherwise builds
# with CUDA here and runs `ctest -L gpu`.
#
#   scripts/gpu-check.sh [tests] [ops] [train]    (no argument: all three, in that order)
#
# tests: the gtest binaries, GPU training checks; ops: the micro-benchmarks; train: the
# end-to-end benchmarks. Naming parts lets a caller with a time limit per command split the run.
# Logs go to gpu-check-logs/; when $OUT is set (the device tool's folder, which takes back only a
# few files) they are also packed into $OUT/gpu-check-logs.tgz after every part, so a run cut
# short still returns what it logged.
# GPU_BENCH_ARGS=--quick runs the benchmarks at their smallest sizes and fewest steps, and the
# 1.5B model in tidal alone (its MFU; torch.compile of 48 layers takes minutes): sized to fit the
# device tool's 10 minutes on an H100, the least important last.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=" ${*:-tests ops train} "
logs=gpu-check-logs
mkdir -p "$logs"
# Packs the logs so far into $OUT (when set).
save_logs() { [[ -n "${OUT:-}" ]] && tar czf "$OUT/gpu-check-logs.tgz" "$logs"; true; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$logs/gpu.txt"
failed=0
# check NAME COMMAND...: runs a check into $logs/NAME.log, says PASS or FAIL, shows the log's end.
check() {
  local name=$1
  shift
  if "$@" > "$logs/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name (exit $?)"; failed=1; fi
  tail -25 "$logs/$name.log"
}
if [[ -d .gpu/bin ]]; then
  tidal=.gpu/bin/tidal
  bench_ops=.gpu/bin/bench_gpu_ops
  export LD_LIBRARY_PATH="$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$tidal" info | tee "$logs/info.txt"
  if [[ $parts == *" tests "* ]]; then
    for t in .gpu/bin/test_cuda_*; do
      name=$(basename "$t")
      if "$t" --gtest_brief=1 > "$logs/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name"; failed=1; fi
      grep -E "FAILED|Failure|Expected|Which is|worst" "$logs/$name.log" | head -40
      save_logs
    done
    check check_gpu_training bash tests/gpu/check_gpu_training.sh "$tidal"
    save_logs
    check check_gpu_loss_curve python3 tests/gpu/check_gpu_loss_curve.py "$tidal"
    save_logs
  fi
else
  scripts/build.sh -DTIDAL_CUDA=ON > "$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; save_logs; exit 1; }
  tidal=build/src/tidal
  bench_ops=build/bench/bench_gpu_ops
  if [[ $parts == *" tests "* ]]; then
    (cd build && ctest -L gpu --output-on-failure) 2>&1 | tee "$logs/ctest-gpu.log" || failed=1
    save_logs
  fi
fi
if [[ $parts == *" ops "* && -x $bench_ops ]]; then
  python3 bench/gpu_ops.py "$bench_ops" ${GPU_BENCH_ARGS:-} 2>&1 | tee "$logs/bench_gpu_ops.txt" || failed=1
  save_logs
fi
if [[ $parts == *" train "* ]]; then
  # Training end to end: tidal beside PyTorch (a system that fails to train fails the check).
  big_systems=tidal,eager,compile
  [[ " ${GPU_BENCH_ARGS:-} " == *" --quick "* ]] && big_systems=tidal
  python3 bench/gpu_train.py --tidal "$tidal" --model 124m ${GPU_BENCH_ARGS:-} 2>&1 |
    tee "$logs/bench_gpu_train_124m.txt" || failed=1
  save_logs
  python3 bench/gpu_train.py --tidal "$tidal" --model 1.5b --systems "$big_systems" ${GPU_BENCH_ARGS:-} 2>&1 |
    tee "$logs/bench_gpu_train_1.5b.txt" || failed=1
  save_logs
  python3 bench/activation_checkpointing.py --tidal "$tidal" --device cuda ${GPU_BENCH_ARGS:-} 2>&1 |
    tee "$logs/bench_activation_checkpointing.txt" || failed=1
  save_logs
fi
exit $failed
