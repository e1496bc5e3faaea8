#!/usr/bin/env bash
# Builds, on this machine, what scripts/gpu-check.sh runs on a GPU machine that has the CUDA
# toolkit but none of tidal's other dependencies and no network (the device machines lent to
# some sessions): tidal and the GPU tests and benchmarks for sm_90 (H100 / H200), without MPI
# (one process) and for a generic x86-64 CPU, with every shared library they need other than
# CUDA's and the C runtime's, into .gpu/ (ignored by git; pass it to the device run as carried).
# usage: scripts/gpu-bundle.sh        then on the GPU machine: scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu-bundle: needs nvcc (the CUDA toolkit)"; exit 2; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDAL_CUDA=ON -DTIDAL_MPI=OFF -DTIDAL_NATIVE=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
targets=(tidal $(cd tests/gpu && ls test_cuda_*.cpp | sed 's/\.cpp$//'))
if [[ -f bench/gpu_ops.cpp ]]; then targets+=(bench_gpu_ops); fi
cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}"
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
for t in "${targets[@]}"; do
  f=$(find build-gpu -type f -name "$t" -perm -u+x | head -1)
  cp "$f" .gpu/bin/
done
# Shared libraries, but not CUDA's (the GPU machine has its own, matching its driver) nor glibc's.
for f in .gpu/bin/*; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libcuda*|libcublas*|libcudart*|libnccl*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*) ;;
    *) cp -L "$lib" .gpu/lib/ ;;
  esac
done
du -sh .gpu
echo "gpu-bundle: .gpu/ holds $(ls .gpu/bin | wc -l) programs and $(ls .gpu/lib | wc -l) libraries"
