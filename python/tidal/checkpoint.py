"""A tidal checkpoint's tensors as NumPy arrays, mapped from its safetensors file (no copy)."""
import json
import os
import struct

import numpy as np

from . import _tidal

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def load_checkpoint(path, *, optimizer=False):
    """{name: array} of a checkpoint: `path` is a checkpoint directory (its `latest` step) or one
    of its step-* directories. The arrays are read-only views of the file mapped into memory
    (nothing is copied until written to or converted); bf16 tensors, which NumPy has no type
    for, come widened to float32 (a copy). optimizer=True reads optimizer.safetensors (the
    moments, "m.<name>" and "v.<name>") instead of model.safetensors."""
    step_dir = _tidal.checkpoint_step_dir(os.fspath(path))
    file = os.path.join(step_dir, "optimizer.safetensors" if optimizer else "model.safetensors")
    blob = np.memmap(file, dtype=np.uint8, mode="r")
    (n,) = struct.unpack("<Q", bytes(blob[:8]))
    header = json.loads(bytes(blob[8:8 + n]))
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        raw = data[begin:end]
        if info["dtype"] == "BF16":
            out[name] = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        else:
            dtype = _DTYPES.get(info["dtype"])
            if dtype is None:
                raise _tidal.TidalError(f"{file}: tensor {name} has dtype {info['dtype']}, which NumPy cannot hold")
            out[name] = raw.view(dtype).reshape(shape)
    return out
