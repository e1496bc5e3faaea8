#!/usr/bin/env bash
# Where a run is in its data survives a change of layout: a GPT trains on a blend of three token
# sources by weight (0.5 a shard, 0.3 a directory of shards, 0.2 a glob), evaluating on a fourth
# (data.eval_path), with train.log_samples naming every step's global batch as the data-parallel
# replicas read it. Uninterrupted under data 4 for 8 steps; then stopped at step 4 with a
# checkpoint and resumed under data 2, and stopped under 1D tensor 2 and resumed under pipeline 2:
# the sample ids of steps 5-8 equal the uninterrupted run's (and one process's, every step's), and
# the losses follow the uninterrupted run's within fp32's tolerance (check_composition.sh: 1e-5).
# usage: check_data_resume.sh path/to/tidal <mpirun command...>
set -euo pipefail
tidal=$1; shift
MPIRUN=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
support=$(cd "$(dirname "$0")/../support" && pwd)
mkdir -p "$dir/b" "$dir/c"
/usr/bin/python3 - "$dir" <<'PY'
import random, struct, sys
d = sys.argv[1]
def shard(path, n, seed, wide=False):
    rng = random.Random(seed)
    header = [20240520, 2 if wide else 1, n] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{n}{'I' if wide else 'H'}", *(rng.randrange(512) for _ in range(n))))
shard(f"{d}/a.bin", 20000, 1)
shard(f"{d}/b/part0.bin", 7000, 2)
shard(f"{d}/b/part1.bin", 9000, 3, wide=True)
shard(f"{d}/c/c_0.bin", 6000, 4)
shard(f"{d}/c/c_1.bin", 6000, 5)
shard(f"{d}/eval.bin", 4000, 6)
PY
common=(--set train.steps=8 --set train.batch_size=8 --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4
        --set model.seq_len=32 --set model.vocab_size=512 --set train.eval_every=4 --set train.eval_batches=2
        --set train.warmup_steps=2 --set train.lr=3e-4 --set data.kind=tokens
        --set "data.path=0.5 $dir/a.bin 0.3 $dir/b 0.2 $dir/c/c_*.bin" --set data.eval_path="$dir/eval.bin"
        --set train.log_samples=true)
# launch <ranks> <name> <arguments...>
launch() {
  local np=$1 name=$2; shift 2
  local how=()
  [ "$np" = 1 ] || how=("${MPIRUN[@]}" -np "$np")
  "${how[@]}" "$tidal" train "${common[@]}" "$@" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
}
launch 4 whole --set parallel.data=4 --metrics "$dir/whole.jsonl"
launch 1 one --metrics "$dir/one.jsonl"
launch 4 d4_stop --set parallel.data=4 --set checkpoint.dir="$dir/ck_d4" --stop-after 4
launch 2 d2_resumed --set parallel.data=2 --resume "$dir/ck_d4" --metrics "$dir/d2_resumed.jsonl"
launch 2 t2_stop --set parallel.tensor.size=2 --set checkpoint.dir="$dir/ck_t2" --stop-after 4
launch 2 p2_resumed --set parallel.pipeline=2 --set train.micro_batch_size=4 --resume "$dir/ck_t2" \
  --metrics "$dir/p2_resumed.jsonl"
/usr/bin/python3 - "$dir" "$support" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from runs import compare
d = sys.argv[1]
def samples(name):
    return {r["step"]: r["sample_ids"] for r in map(json.loads, open(f"{d}/{name}.jsonl"))
            if "sample_ids" in r and not r.get("summary")}
whole, one = samples("whole"), samples("one")
assert sorted(whole) == list(range(1, 9)) and all(len(whole[s]) == 8 for s in whole), whole
assert one == whole, "one process reads other samples than data 4"
sources = sorted({i >> 40 for ids in whole.values() for i in ids})
assert sources == [0, 1, 2], f"the blend drew from sources {sources}"
for name in ("d2_resumed", "p2_resumed"):
    resumed = samples(name)
    assert sorted(resumed) == [5, 6, 7, 8], f"{name}: steps {sorted(resumed)}"
    assert all(resumed[s] == whole[s] for s in resumed), f"{name}: the samples after the resume differ"
    compare(d, name, "whole", 1e-5)
print(f"PASS: the samples of steps 5-8 after resuming under data 2 and under pipeline 2 equal the uninterrupted "
      f"run's ({sum(len(v) for v in whole.values())} samples from {len(sources)} sources, the same in one process)")
PY
