"""tidal from Python: configs, in-process training with callbacks, checkpoints as NumPy arrays.

    import tidal
    cfg = tidal.Config({"train": {"steps": 200}, "model": {"n_layer": 4}})
    summary = tidal.train(cfg, callbacks=[lambda m: print(m["step"], m["loss"])])

Under mpirun / srun every rank runs the same script; training runs on the layout the config's
[parallel] section names, and train() returns the summary on every rank. A user error (a bad
key, a missing file, a layout that does not fit the ranks) raises tidal.TidalError carrying
tidal's message, which names the key or file and the fix.
"""
import importlib.util
import json
import os
import subprocess
import sys
import warnings


def _choose_blas_kernels():
    """Debian's OpenBLAS picks its kernels by CPU model when it loads, and falls back to slow generic
    ones on a model newer than itself; only OPENBLAS_CORETYPE, set before it loads, overrides that.
    The tidal command re-executes itself with it (core/blas_kernels.h); a Python process cannot, so
    a child process loads the extension first and says whether the library falls back and which
    kernels the CPU runs instead. This process sets OPENBLAS_CORETYPE to those before it loads the
    library, and trains as the command does. Returns the kernels set, or None."""
    if "OPENBLAS_CORETYPE" in os.environ or "TIDAL_KEEP_BLAS_KERNELS" in os.environ:
        return None
    extension = importlib.util.find_spec(f"{__name__}._tidal")
    if extension is None or not extension.origin:
        return None
    probe = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('_tidal', sys.argv[1]); "
             "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print(m.better_blas_kernels() or '')")
    try:
        r = subprocess.run([sys.executable, "-c", probe, extension.origin], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.SubprocessError):  # no interpreter to run (embedded), or it hung
        return None
    if r.returncode != 0 or not r.stdout.strip():
        return None
    os.environ["OPENBLAS_CORETYPE"] = r.stdout.strip()
    return os.environ["OPENBLAS_CORETYPE"]


_kernels = _choose_blas_kernels()

from . import _tidal  # noqa: E402 (after OPENBLAS_CORETYPE is settled)
from ._tidal import TidalError  # noqa: E402
from .checkpoint import load_checkpoint  # noqa: E402

if _kernels and _tidal.blas_kernel_name() != _kernels:
    warnings.warn(
        f"OpenBLAS was loaded before tidal (by numpy, say) and fell back to its generic kernels on this CPU; "
        f"import tidal first, or start Python with OPENBLAS_CORETYPE={_kernels}, for the fast ones (the tidal "
        f"command does this itself)", RuntimeWarning, stacklevel=2)

__all__ = ["Config", "Trainer", "TidalError", "train", "load_checkpoint", "rank", "world_size", "main"]


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    raise TidalError(f"config value {value!r}: give a bool, a number or a string")


def _flatten(values, prefix=""):
    """{"train": {"steps": 10}} or {"train.steps": 10} -> ["train.steps=10"]."""
    out = []
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, name + ".")
        else:
            out.append(f"{name}={_toml_value(value)}")
    return out


class Config:
    """A validated run configuration: a TOML file's keys (or the defaults), then `values` (a dict,
    nested by section or with dotted keys), then `overrides` ("section.key=value" strings, as
    tidal train --set takes them). Every key is checked against tidal's schema."""

    def __init__(self, values=None, *, path=None, overrides=()):
        if isinstance(values, (str, os.PathLike)) and path is None:
            values, path = None, values
        self._overrides = _flatten(values or {}) + list(overrides)
        self._path = os.fspath(path) if path is not None else ""
        self._config = _tidal.load_config(self._path, self._overrides)

    def to_toml(self):
        """The resolved configuration as TOML (every key, defaults included)."""
        return self._config.to_toml()

    def __repr__(self):
        return f"tidal.Config(path={self._path!r}, overrides={self._overrides!r})"


class Trainer:
    """One run: Trainer(cfg).fit() trains it. Callbacks: objects with any of on_step_end(metrics),
    on_evaluation(step, eval_loss), on_checkpoint(step, dir) and should_stop() -> bool, or plain
    callables called with each step's metrics dict (the --metrics JSON line)."""

    def __init__(self, config, *, callbacks=(), metrics="", quiet=False):
        if not isinstance(config, Config):
            config = Config(config)
        self.config = config
        self._trainer = _tidal._Trainer(config._config, os.fspath(metrics), quiet)
        for c in callbacks:
            self.add_callback(c)

    def add_callback(self, callback):
        self._trainer.add_callback(callback)

    def load(self, checkpoint):
        """Continue from a checkpoint (saved under any layout); before fit()."""
        self._trainer.load(os.fspath(checkpoint))

    def fit(self):
        """Trains to train.steps (or until a callback stops it); returns the summary dict."""
        return self._trainer.fit()

    def evaluate(self):
        """The mean eval loss on the fixed eval set."""
        return self._trainer.evaluate()

    def save(self, directory):
        """A checkpoint at the current step into directory/step-<step>."""
        self._trainer.save(os.fspath(directory))

    @property
    def step(self):
        return self._trainer.step


def train(config=None, *, callbacks=(), metrics="", resume=None, quiet=False):
    """Trains in this process (every rank under mpirun) and returns the summary: the metrics'
    summary record as a dict (final_loss, tokens_per_s, steps, ...)."""
    trainer = Trainer(config if config is not None else Config(), callbacks=callbacks, metrics=metrics, quiet=quiet)
    if resume:
        trainer.load(resume)
    return trainer.fit()


def rank():
    """This process's rank (0 without a launcher)."""
    return _tidal.rank()


def world_size():
    return _tidal.world_size()


def main(argv=None):
    """The tidal command in this process: main(["train", "--set", "train.steps=10"])."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    return _tidal.cli(["tidal"] + args)
