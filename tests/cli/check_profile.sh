#!/usr/bin/env bash
# train.profile = true: every step's metrics record and the summary carry `profile` with every op
# family, the families never add up to more than the step, and the run ends with the profile lines.
# usage: check_profile.sh path/to/tidal
set -euo pipefail
tidal=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tidal" train --set train.steps=5 --set train.batch_size=4 --set model.n_layer=2 --set train.eval_batches=1 \
  --set train.profile=true --metrics "$dir/m.jsonl" > "$dir/out.txt"
grep -q "^profile: .* ms per step" "$dir/out.txt" || { echo "no profile line in the output:"; cat "$dir/out.txt"; exit 1; }
grep -q "by op family:" "$dir/out.txt" && grep -q "by module:" "$dir/out.txt"
/usr/bin/python3 - "$dir/m.jsonl" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in records if "step_time_s" in r]
summary = records[-1]
assert summary.get("summary") and "profile" in summary, "the summary has no profile"
families = {"gemm", "attention", "layernorm", "gelu", "cross_entropy", "optimizer", "copy_cast", "elementwise",
            "communication", "outside_ops"}
for r in steps + [summary]:
    p = r["profile"]
    assert set(p["ops_s"]) == families, sorted(p["ops_s"])
    in_ops = sum(v for k, v in p["ops_s"].items() if k != "outside_ops")
    assert in_ops <= p["step_s"] * 1.001, (in_ops, p["step_s"])
    assert abs(in_ops + p["ops_s"]["outside_ops"] - p["step_s"]) < 1e-6 * max(1.0, p["step_s"]), p
    assert p["ops_s"]["gemm"] > 0 and p["ops_s"]["attention"] > 0 and p["modules_s"]["Linear"] > 0, p
p = summary["profile"]
print("profile per step: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in sorted(p["ops_s"].items(), key=lambda kv: -kv[1])))
PY
