#!/usr/bin/env bash
# Installs NVIDIA's cudnn-frontend headers from PyPI (the pinned `nvidia-cudnn-frontend` wheel,
# its hash checked; header-only C++, Apache-2.0) into $TIDAL_CUDNN_FRONTEND_DIR (default
# ~/.cache/tidal/cudnn-frontend): with them and cuDNN 9's cudnn.h, a CUDA build runs attention
# through cuDNN's fused flash kernels (ops/cuda/cudnn_attention.h; train.attention). tidal loads
# libcudnn.so.9 at run time, so a machine without cuDNN still runs (on tidal's own kernels).
# Only needed where nvcc builds the CUDA backend; safe to re-run.
set -euo pipefail
version=1.32.0
sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
dir="${TIDAL_CUDNN_FRONTEND_DIR:-$HOME/.cache/tidal/cudnn-frontend}"
if [[ -f "$dir/VERSION" && "$(cat "$dir/VERSION")" == "$version" ]]; then
  echo "cudnn-frontend: $dir ready ($version)"
  exit 0
fi
echo "cudnn-frontend: installing $version's headers from PyPI into $dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheel is built per Python, its headers are not: the CPython 3.11 one is pinned whatever
# this machine's Python is.
source "$(dirname "$0")/pinned_wheel.sh"
pinned_wheel "nvidia-cudnn-frontend==$version" "$sha256" "$tmp" --only-binary=:all: --python-version 3.11 \
  --implementation cp --abi cp311 --platform manylinux_2_28_x86_64
mkdir -p "$dir.new"
/usr/bin/python3 - "$tmp"/wheel/nvidia_cudnn_frontend-*.whl "$dir.new" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
found = False
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        licence = name.endswith(".dist-info/licenses/LICENSE.txt") or name.endswith(".dist-info/LICENSE.txt")
        if not (name.startswith("include/") or licence) or name.endswith("/"):
            continue
        target = os.path.join(out, "LICENSE.txt" if licence else name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
        found |= name == "include/cudnn_frontend.h"
if not found:
    sys.exit("cudnn-frontend: the wheel lacks include/cudnn_frontend.h")
PY
echo "$version" > "$dir.new/VERSION"
rm -rf "$dir"
mv "$dir.new" "$dir"
echo "cudnn-frontend: $version's headers in $dir/include"
