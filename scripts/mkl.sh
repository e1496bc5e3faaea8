#!/usr/bin/env bash
# Installs Intel oneMKL's runtime from PyPI (the pinned `mkl` wheel, its hash checked) into
# $TIDAL_MKL_DIR (default ~/.cache/tidal/mkl): tidal's fp32 CPU GEMMs run on MKL's sgemm where
# this is present (ops/cpu/mkl_blas.h), and on oneDNN / OpenBLAS, Debian's, where it is not.
# Only the libraries sgemm needs are kept (the wheel's threading layer for GNU OpenMP, which
# shares tidal's threads, and the CPU kernels), with the licence. Safe to re-run; TIDAL_MKL=off
# skips it (the build and the suite then run on Debian's libraries alone).
set -euo pipefail
version=2026.2.0
sha256=eaab1875ce9f47ab3c66d5632cef06baf768c05781f2f28847bdbc4343500ed7
dir="${TIDAL_MKL_DIR:-$HOME/.cache/tidal/mkl}"
if [[ "${TIDAL_MKL:-}" == off ]]; then
  echo "mkl: skipped (TIDAL_MKL=off)"
  exit 0
fi
if [[ -f "$dir/VERSION" && "$(cat "$dir/VERSION")" == "$version" ]]; then
  echo "mkl: $dir ready (oneMKL $version)"
  exit 0
fi
echo "mkl: installing oneMKL $version from PyPI into $dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/pinned_wheel.sh"
pinned_wheel "mkl==$version" "$sha256" "$tmp"
mkdir -p "$dir.new"
/usr/bin/python3 - "$tmp"/wheel/mkl-*.whl "$dir.new" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
keep = {"libmkl_rt.so.3", "libmkl_core.so.3", "libmkl_gnu_thread.so.3", "libmkl_sequential.so.3",
        "libmkl_intel_lp64.so.3", "libmkl_def.so.3", "libmkl_mc3.so.3", "libmkl_avx2.so.3",
        "libmkl_avx512.so.3", "libmkl_avx10.so.3", "LICENSE.txt"}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base in keep:
            with z.open(name) as src, open(os.path.join(out, base), "wb") as dst:
                dst.write(src.read())
            keep.discard(base)
if keep:
    sys.exit(f"mkl: the wheel lacks {sorted(keep)}")
PY
echo "$version" > "$dir.new/VERSION"
rm -rf "$dir"
mv "$dir.new" "$dir"
echo "mkl: oneMKL $version in $dir"
