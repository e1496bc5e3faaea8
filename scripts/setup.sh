#!/usr/bin/env bash
# Installs every Debian package that tidal's build, tests and benchmarks need. Safe to re-run.
# The CUDA toolkit is not installed here: with nvcc present, CMake builds the CUDA backend too
# (and cudnn-frontend's headers come from PyPI: scripts/cudnn-frontend.sh).
#
#   scripts/setup.sh              everything (scripts/test.sh)
#   scripts/setup.sh --for train  what building and running the `tidal` binary needs (the README's
#                                 first command): no test oracles (PyTorch), no clang, no GoogleTest
set -euo pipefail
purpose=all
if [[ "${1:-}" == --for ]]; then
  purpose="${2:?--for train|all}"
fi
packages=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin
  libtomlplusplus-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  libicu-dev libxxhash-dev
  python3 python3-venv
)
case "$purpose" in
  train) ;;
  all) packages+=(libgtest-dev clang libclang-rt-14-dev libomp-dev python3-dev python3-numpy python3-torch pybind11-dev) ;;
  *)
    echo "setup.sh: --for takes train or all, not '$purpose'" >&2
    exit 2
    ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
# Intel oneMKL from PyPI (fp32 CPU GEMMs; optional: TIDAL_MKL=off skips it).
"$(dirname "$0")/mkl.sh"
# cudnn-frontend's headers from PyPI, where nvcc builds the CUDA backend (attention through cuDNN;
# optional: TIDAL_CUDNN=off skips it, and attention runs on tidal's own kernels).
if [[ "${TIDAL_CUDNN:-}" != off ]] && { command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  "$(dirname "$0")/cudnn-frontend.sh"
fi
