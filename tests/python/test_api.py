"""The Python package (python/tidal) against the tidal command: the same training in-process from a
dict config gives the command's metrics bitwise; callbacks see every step and can stop training;
errors raise TidalError naming the key; checkpoints come back as the safetensors file's arrays;
`python3 -m tidal` is the command; under mpirun each rank runs the same script.

Run by ctest (label python) with PYTHONPATH at the build's python/ directory, TIDAL_BIN the
tidal binary and TIDAL_MPIRUN the launcher command.
"""
import json
import os
import shlex
import subprocess
import sys
import textwrap

# tidal before numpy: Debian's numpy loads OpenBLAS, and tidal sets the kernels it loads with
# (OPENBLAS_CORETYPE, as the command does; python/tidal/__init__.py), so the runs below match
# the command's bit for bit where the library would fall back to generic kernels.
import tidal

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.numpy  # noqa: E402

TIDAL_BIN = os.environ["TIDAL_BIN"]
MPIRUN = shlex.split(os.environ.get("TIDAL_MPIRUN", "mpirun"))
SMALL = {"train": {"steps": 8, "batch_size": 4, "eval_every": 4, "eval_batches": 1},
         "model": {"n_layer": 2, "n_embd": 32, "n_head": 2, "seq_len": 16}}
# Keys of a step's record that time the step or measure the process (the rest is a pure function
# of the seed).
TIMED = {"tokens_per_s", "step_time_s", "data_s", "allreduce_s", "allreduce_exposed_s", "resident_bytes"}


def sets(values, prefix=""):
    out = []
    for k, v in values.items():
        if isinstance(v, dict):
            out += sets(v, f"{prefix}{k}.")
        else:
            out += ["--set", f"{prefix}{k}={json.dumps(v) if isinstance(v, str) else v}"]
    return out


def records(path):
    rows = [json.loads(line) for line in open(path)]
    steps = [{k: v for k, v in r.items() if k not in TIMED} for r in rows if "loss" in r and not r.get("summary")]
    evals = [r for r in rows if "eval_loss" in r]
    summary = [r for r in rows if r.get("summary")][-1]
    return steps, evals, summary


def cli(*args, env=None):
    return subprocess.run([TIDAL_BIN, *args], capture_output=True, text=True, env=env)


def test_dict_config_trains_as_the_command(tmp_path):
    cli_metrics, py_metrics = tmp_path / "cli.jsonl", tmp_path / "py.jsonl"
    r = cli("train", *sets(SMALL), "--metrics", str(cli_metrics))
    assert r.returncode == 0, r.stderr
    summary = tidal.train(tidal.Config(SMALL), metrics=py_metrics, quiet=True)
    cli_steps, cli_evals, cli_summary = records(cli_metrics)
    py_steps, py_evals, py_summary = records(py_metrics)
    assert len(py_steps) == 8 and py_steps == cli_steps  # losses, lr, gradient norms: bitwise
    assert py_evals == cli_evals
    assert summary["final_loss"] == cli_summary["final_loss"] == py_summary["final_loss"]
    assert summary["steps"] == 8 and summary["completed"]


def test_flat_keys_overrides_and_a_toml_file(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('[model]\nn_layer = 3\n[train]\nsteps = 5\n')
    cfg = tidal.Config({"model.n_embd": 48, "train.precision": "bf16"}, path=toml, overrides=["model.n_head=4"])
    text = cfg.to_toml()
    for line in ("n_layer = 3", "steps = 5", "n_embd = 48", "n_head = 4", 'precision = "bf16"'):
        assert line in text, line


class StopAtFive:
    def __init__(self):
        self.seen = []
        self.evaluations = []

    def on_step_end(self, metrics):
        self.seen.append((metrics["step"], metrics["loss"]))

    def on_evaluation(self, step, eval_loss):
        self.evaluations.append(step)

    def should_stop(self):
        return self.seen[-1][0] >= 5


def test_a_callback_stops_training_at_step_five(tmp_path):
    stop = StopAtFive()
    plain = []
    cfg = tidal.Config(SMALL, overrides=["train.steps=20", f"checkpoint.dir={tmp_path / 'ck'}"])
    summary = tidal.train(cfg, callbacks=[stop, plain.append], quiet=True)
    assert [s for s, _ in stop.seen] == [1, 2, 3, 4, 5]
    assert [m["step"] for m in plain] == [1, 2, 3, 4, 5] and all("loss" in m for m in plain)
    assert stop.evaluations == [4]
    assert summary["steps"] == 5 and summary["stopped_early"] and not summary["completed"]
    assert os.path.isdir(tmp_path / "ck" / "step-00000005")


def test_a_bad_key_raises_naming_it():
    with pytest.raises(tidal.TidalError, match="train.stepz"):
        tidal.Config({"train": {"stepz": 3}})
    with pytest.raises(tidal.TidalError, match="model.n_head"):
        tidal.Config({"model": {"n_head": 5, "n_embd": 32}})
    with pytest.raises(tidal.TidalError, match="does-not-exist.toml"):
        tidal.Config(path="does-not-exist.toml")


def test_checkpoint_arrays_are_the_safetensors_files(tmp_path):
    ck = tmp_path / "ck"
    trainer = tidal.Trainer(tidal.Config(SMALL, overrides=["train.steps=3"]), quiet=True)
    trainer.fit()
    trainer.save(ck)
    step_dir = ck / "step-00000003"
    # One process writes every tensor whole into its one file: weights, and moments as m. / v.
    theirs = safetensors.numpy.load_file(str(step_dir / "rank-00000.safetensors"))
    for optimizer in (False, True):
        mine = tidal.load_checkpoint(ck, optimizer=optimizer)  # the directory's latest
        wanted = {k: v for k, v in theirs.items() if k.startswith(("m.", "v.")) == optimizer}
        assert mine.keys() == wanted.keys() and len(mine) > 0
        for name, array in wanted.items():
            assert mine[name].dtype == array.dtype and mine[name].shape == array.shape, name
            assert np.array_equal(mine[name], array), name
    weights = tidal.load_checkpoint(step_dir)
    wte = weights["wte.weight"]
    assert not wte.flags.owndata and not wte.flags.writeable  # a view of the mapped file
    with pytest.raises(tidal.TidalError, match="checkpoint"):
        tidal.load_checkpoint(tmp_path)


def test_a_checkpoint_saved_in_blocks_comes_back_whole(tmp_path):
    # Two tensor-parallel ranks each write their blocks (the fused qkv weight in three pieces per
    # rank); the arrays assembled are the tensors `tidal checkpoint consolidate` gathers whole.
    ck, whole = tmp_path / "ck", tmp_path / "whole"
    r = subprocess.run([*MPIRUN, "-np", "2", TIDAL_BIN, "train", *sets(SMALL), "--set", "parallel.tensor.size=2",
                        "--set", f"checkpoint.dir={ck}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(list(ck.glob("step-*/rank-*.safetensors"))) == 2
    r = cli("checkpoint", "consolidate", str(ck), str(whole))
    assert r.returncode == 0, r.stderr
    for optimizer, file in ((False, "model.safetensors"), (True, "optimizer.safetensors")):
        mine = tidal.load_checkpoint(ck, optimizer=optimizer)
        theirs = safetensors.numpy.load_file(str(whole / file))
        assert mine.keys() == theirs.keys() and len(mine) > 0
        for name, array in theirs.items():
            assert mine[name].shape == array.shape and np.array_equal(mine[name], array), name


def test_python_m_tidal_is_the_command(tmp_path):
    env = dict(os.environ)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    r = subprocess.run([sys.executable, "-m", "tidal", "train", *sets(SMALL), "--metrics", str(a)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "done: 8 steps" in r.stdout
    assert cli("train", *sets(SMALL), "--metrics", str(b)).returncode == 0
    assert records(a)[0] == records(b)[0]
    bad = subprocess.run([sys.executable, "-m", "tidal", "train", "--set", "train.stepz=1"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "train.stepz" in bad.stderr
    assert subprocess.run([sys.executable, "-m", "tidal", "--help"], capture_output=True, env=env).returncode == 0


def test_every_rank_runs_the_same_script_under_mpirun(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys, tidal
        cfg = tidal.Config({json.dumps(SMALL)}, overrides=["parallel.data=2"])
        summary = tidal.train(cfg, metrics=sys.argv[1] if tidal.rank() == 0 else "", quiet=True)
        # One write per line: mpirun interleaves the ranks' output write by write.
        sys.stdout.write(f"rank {{tidal.rank()}} of {{tidal.world_size()}} final {{summary['final_loss']}}\\n")
        sys.stdout.flush()
    """))
    r = subprocess.run([*MPIRUN, "-np", "2", sys.executable, str(script), str(tmp_path / "d2.jsonl")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    finals = sorted(line for line in r.stdout.splitlines() if line.startswith("rank"))
    assert [f.split()[1] for f in finals] == ["0", "1"] and all("of 2" in f for f in finals)
    assert len({f.split()[-1] for f in finals}) == 1  # one final loss on both ranks
    one = tmp_path / "one.jsonl"
    tidal.train(tidal.Config(SMALL), metrics=one, quiet=True)
    d2_steps, _, _ = records(tmp_path / "d2.jsonl")
    one_steps, _, _ = records(one)
    for x, y in zip(d2_steps, one_steps):
        assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(y["loss"]), (x, y)


@pytest.mark.skipif(os.environ.get("TIDAL_QUICK") == "1", reason="TIDAL_QUICK=1 skips the default job")
def test_the_default_job_gives_the_commands_metrics(tmp_path):
    a, b = tmp_path / "cli.jsonl", tmp_path / "py.jsonl"
    r = cli("train", "--metrics", str(a))
    assert r.returncode == 0, r.stderr
    tidal.train(metrics=b, quiet=True)
    cli_steps, cli_evals, cli_summary = records(a)
    py_steps, py_evals, py_summary = records(b)
    assert len(py_steps) == len(cli_steps) > 0
    assert py_steps == cli_steps and py_evals == cli_evals
    assert py_summary["final_loss"] == cli_summary["final_loss"]
