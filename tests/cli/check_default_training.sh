#!/usr/bin/env bash
# `tidal train` with no arguments trains to within 0.05 nats of the Markov language's entropy floor.
# usage: check_default_training.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$dir" && "$tidal" train --metrics "$dir/m.jsonl")
/usr/bin/python3 - "$dir/m.jsonl" <<'PY'
import json, sys
summary = [json.loads(l) for l in open(sys.argv[1])][-1]
assert summary.get("summary") is True, "the last metrics line is not the summary"
gap = summary["final_loss"] - summary["entropy_floor"]
print(f"final_loss {summary['final_loss']:.4f}, entropy_floor {summary['entropy_floor']:.4f}, gap {gap:.4f} nats, "
      f"{summary['tokens_per_s']:.0f} tokens/s")
assert gap < 0.05, f"final loss is {gap:.4f} nats above the floor (want < 0.05)"
PY
