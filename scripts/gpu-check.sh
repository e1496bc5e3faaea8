#!/usr/bin/env bash
# On a machine with a GPU: the GPU tests (op parity against the CPU backend, the GPU's memory
# tiers, training on the GPU) and the GPU micro-benchmarks, in one command. Uses the programs of
# scripts/gpu-bundle.sh in .gpu/ when they are there (a GPU machine without tidal's build
# dependencies); otherwise builds with CUDA here and runs `ctest -L gpu`.
# Logs go to $OUT when it is set (the device tool's folder), else to gpu-check-logs/.
# GPU_BENCH_ARGS=--quick runs the benchmarks at their smallest sizes.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${OUT:-gpu-check-logs}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$logs/gpu.txt"
failed=0
if [[ -d .gpu/bin ]]; then
  export LD_LIBRARY_PATH="$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  .gpu/bin/tidal info | tee "$logs/info.txt"
  for t in .gpu/bin/test_cuda_*; do
    name=$(basename "$t")
    if "$t" --gtest_brief=1 > "$logs/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name"; failed=1; fi
    grep -E "FAILED|Failure|Expected|Which is|worst" "$logs/$name.log" | head -40
  done
  if bash tests/gpu/check_gpu_training.sh .gpu/bin/tidal > "$logs/check_gpu_training.log" 2>&1; then
    echo "PASS check_gpu_training"
  else
    echo "FAIL check_gpu_training (exit $?)"
    failed=1
  fi
  tail -25 "$logs/check_gpu_training.log"
  if [[ -x .gpu/bin/bench_gpu_ops ]]; then
    python3 bench/gpu_ops.py .gpu/bin/bench_gpu_ops ${GPU_BENCH_ARGS:-} 2>&1 | tee "$logs/bench_gpu_ops.txt"
  fi
else
  scripts/build.sh -DTIDAL_CUDA=ON > "$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
  (cd build && ctest -L gpu --output-on-failure) 2>&1 | tee "$logs/ctest-gpu.log" || failed=1
  if [[ -x build/bench/bench_gpu_ops ]]; then
    python3 bench/gpu_ops.py build/bench/bench_gpu_ops ${GPU_BENCH_ARGS:-} 2>&1 | tee "$logs/bench_gpu_ops.txt"
  fi
fi
exit $failed
