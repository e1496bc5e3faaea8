#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with clang into build-fuzz/ (the library instrumented,
# with ASan and UBSan; no CUDA, MPI or Python) and runs them: `scripts/fuzz.sh` for ctest's label
# fuzz (60 s each, as CI), `scripts/fuzz.sh runs:1000000` for a million executions each, or
# `scripts/fuzz.sh 600` for ten minutes each.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-60}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DTIDAL_FUZZ=ON -DTIDAL_CUDA=OFF -DTIDAL_MPI=OFF -DTIDAL_PYTHON=OFF \
  -DTIDAL_TESTS=OFF -DTIDAL_FUZZ_SECONDS="$budget" > /dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_harnesses
ctest --test-dir build-fuzz -L fuzz --output-on-failure -j "$(nproc)"
