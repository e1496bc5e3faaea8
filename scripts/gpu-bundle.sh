#!/usr/bin/env bash
# Builds, on this machine, what scripts/gpu-check.sh runs on a GPU machine that has the CUDA
# toolkit but none of tidal's other dependencies and no network (the device machines lent to
# some sessions): tidal and the GPU tests and benchmarks for sm_90 (H100 / H200) only, for a generic
# x86-64 CPU, stripped, with every shared library they need other than CUDA's, MPI's (Open MPI 4.1:
# the machine's own, which its mpirun launches; libmpi.so.40 on Debian and Ubuntu) and the C
# runtime's, packed with xz into .gpu/tidal-gpu.tar.xz (ignored by git; pass `.gpu` to
# the device run as carried: what travels there, working tree included, is limited to 64 MiB).
# usage: scripts/gpu-bundle.sh        then on the GPU machine: scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
readonly max_mib=60   # the bundle and the working tree must fit the device tool's 64 MiB together
readonly aim_mib=40
scripts/setup.sh
command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu-bundle: needs nvcc (the CUDA toolkit)"; exit 2; }
# Its own build folder: the CPU build's options (native code, MPI, every CUDA architecture) stay
# out of the bundle, and so does any CPU library that only the CPU build links.
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDAL_CUDA=ON -DTIDAL_MPI=ON -DTIDAL_NATIVE=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
targets=(tidal $(cd tests/gpu && ls test_cuda_*.cpp | sed 's/\.cpp$//') bench_gpu_ops bench_cpu_adam)
cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}"
stage=build-gpu/bundle
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find build-gpu -path "$stage" -prune -o -type f -name "$t" -perm -u+x -print | head -1)
  [[ -n $f ]] || { echo "gpu-bundle: $t was not built"; exit 1; }
  cp "$f" "$stage/bin/"
done
# Shared libraries, but not CUDA's (the GPU machine has its own, matching its driver), nor Open
# MPI's (they must match the machine's mpirun), nor the C and C++ runtimes (glibc, libstdc++,
# libgcc_s: the machine's are as new or newer, and its MPI libraries need its own libstdc++).
for f in "$stage"/bin/*; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libcuda*|libcublas*|libcudart*|libnccl*|libmpi*|libopen-pal*|libopen-rte*|libhwloc*|libevent*|libpmix*|libstdc++*|libgcc_s*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
strip --strip-all "$stage"/bin/*
strip --strip-unneeded "$stage"/lib/*
rm -rf .gpu && mkdir -p .gpu
# xz: OpenBLAS, oneDNN and ICU's data pack to a third of gzip's size (23 MiB against 42).
tar -C "$stage" -cf - bin lib | xz -9 -T0 > .gpu/tidal-gpu.tar.xz
bytes=$(stat -c %s .gpu/tidal-gpu.tar.xz)
mib=$(( (bytes + (1 << 20) - 1) >> 20 ))
echo "gpu-bundle: .gpu/tidal-gpu.tar.xz is ${mib} MiB ($bytes bytes; $(du -sh "$stage" | cut -f1) unpacked):" \
  "$(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | wc -l) libraries"
if (( mib > max_mib )); then
  echo "gpu-bundle: over ${max_mib} MiB: it and the working tree would not fit what the device tool carries (64 MiB)"
  du -sh "$stage"/bin/* "$stage"/lib/* | sort -h | tail -8
  exit 1
fi
(( mib <= aim_mib )) || echo "gpu-bundle: warning: over the ${aim_mib} MiB aimed for"
