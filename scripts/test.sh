#!/usr/bin/env bash
# The test command of the README: install, build, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/oracle-venv.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
