#!/usr/bin/env bash
# The sanitizer runs (not in the default suite: each builds the library again, instrumented).
#   scripts/sanitize.sh asan [LABELS]   AddressSanitizer + UndefinedBehaviorSanitizer over ctest's
#                              labels (default "unit|mpi"; build-asan/; CPU only, the tests' MPI
#                              ranks included)
#   scripts/sanitize.sh tsan   ThreadSanitizer over the tests whose threads tidal starts itself: the
#                              MPI progress thread (test_collectives, test_zero_chunks, under mpirun),
#                              the disk tier's read-ahead thread (test_disk_tier), a checkpoint's
#                              background writer (test_checkpoint) and the staged collectives'
#                              stager thread (test_staged_communicator, under mpirun) (build-tsan/)
# A finding fails the run (exit 1). Open MPI and OpenMP's runtime are not instrumented: TSan's
# reports inside them are suppressed (tests/support/tsan.supp), and the tests run one OpenMP thread.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: scripts/sanitize.sh asan|tsan}
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIDAL_CUDA=OFF -DTIDAL_PYTHON=OFF -DTIDAL_NATIVE=OFF)
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
case $what in
  asan)
    cmake -S . -B build-asan "${common[@]}" -DTIDAL_SANITIZE=ON > /dev/null
    cmake --build build-asan -j "$(nproc)"
    # Leaks: Open MPI's own allocations at exit are not tidal's.
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      ctest --test-dir build-asan -L "${2:-unit|mpi}" --output-on-failure -j "$(nproc)"
    ;;
  tsan)
    cmake -S . -B build-tsan "${common[@]}" -DTIDAL_TSAN=ON > /dev/null
    cmake --build build-tsan -j "$(nproc)" --target test_collectives test_zero_chunks test_disk_tier test_checkpoint \
      test_staged_communicator
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/support/tsan.supp"
    export OMP_NUM_THREADS=1
    build-tsan/tests/test_disk_tier
    build-tsan/tests/test_checkpoint --gtest_filter=-*Kill*  # fork() under TSan: the kill trials stay in the suite
    for np in 2 4; do
      "${mpirun[@]}" -np "$np" -x TSAN_OPTIONS -x OMP_NUM_THREADS build-tsan/tests/test_collectives
      "${mpirun[@]}" -np "$np" -x TSAN_OPTIONS -x OMP_NUM_THREADS build-tsan/tests/test_zero_chunks
      "${mpirun[@]}" -np "$np" -x TSAN_OPTIONS -x OMP_NUM_THREADS build-tsan/tests/test_staged_communicator
    done
    echo "sanitize: ThreadSanitizer found nothing"
    ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan"; exit 2 ;;
esac
