#!/usr/bin/env bash
# The README's first command: install, build, and run the default training job (a small GPT on
# the built-in Markov language, about a minute on 2 cores). Extra arguments go to `tidal train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/src/tidal train "$@"
