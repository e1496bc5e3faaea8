#!/usr/bin/env bash
# Configures and builds tidal into build/ (Release). Extra arguments go to CMake.
#
#   scripts/build.sh            everything: the library, the CLI, tests, benchmarks, examples, the
#                               Python module, and the CUDA backend where nvcc is installed
#   scripts/build.sh --for train
#                               only the `tidal` binary, and the CUDA backend only where a GPU is
#                               present (nvidia-smi sees one) or TIDAL_CUDA=on asks for it: the
#                               README's first command, on a machine that may never run a kernel
set -euo pipefail
cd "$(dirname "$0")/.."
purpose=all
if [[ "${1:-}" == --for ]]; then
  purpose="${2:?--for train|all}"
  shift 2
fi
case "$purpose" in
  train)
    cuda="${TIDAL_CUDA:-}"
    if [[ -z "$cuda" ]]; then
      cuda=off
      if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then cuda=on; fi
    fi
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDAL_TESTS=OFF "-DTIDAL_CUDA=${cuda^^}" "$@"
    cmake --build build -j "$(nproc)" --target tidal
    ;;
  all)
    # -U: the CUDA backend's default again (on where nvcc is), whatever a train build chose.
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDAL_TESTS=ON -UTIDAL_CUDA "$@"
    cmake --build build -j "$(nproc)"
    ;;
  *)
    echo "build.sh: --for takes train or all, not '$purpose'" >&2
    exit 2
    ;;
esac
