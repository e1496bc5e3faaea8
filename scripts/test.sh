#!/usr/bin/env bash
# The test command of the README: install, build, run the whole suite, then the fuzz harnesses
# (60 s each, built with clang into build-fuzz/: scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/oracle-venv.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
scripts/fuzz.sh
