#!/usr/bin/env bash
# The README's first command: install what the `tidal` binary needs, build it (the CUDA backend
# only where a GPU is: scripts/build.sh --for train), and run the default training job (a small
# GPT on the built-in Markov language, about a minute on 2 cores). Extra arguments go to
# `tidal train`. scripts/test.sh installs and builds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --for train
scripts/build.sh --for train
exec build/src/tidal train "$@"
