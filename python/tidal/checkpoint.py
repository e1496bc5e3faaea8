"""A tidal checkpoint's tensors as NumPy arrays, whole, under any layout that saved them.

A checkpoint step directory holds one safetensors file per rank (each with the blocks of the
tensors that rank owned) and metadata.json, which maps every tensor to its blocks; an older one
(format 1) holds model.safetensors and optimizer.safetensors of whole tensors. Files are mapped,
not read: a tensor stored whole in one file comes as a read-only view of its pages; one stored in
blocks is assembled into an array of its own."""
import json
import os
import struct

import numpy as np

from . import _tidal

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _arrays(file):
    """{name: array} of a safetensors file, each a view of the mapped file (bf16 widened: a copy)."""
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


def _assembled(step_dir, metadata, wanted):
    """{name: array} of the tensors `wanted` picks, from a format-2 step directory's blocks."""
    files = {}
    out = {}
    for name, tensor in metadata["tensors"].items():
        if not wanted(name):
            continue
        blocks = tensor["blocks"]
        views = []
        for block in blocks:
            file = metadata["files"][block["file"]]["file"]
            if file not in files:
                files[file] = _arrays(os.path.join(step_dir, file))
            views.append((files[file][block["key"]], block["pieces"]))
        shape = tuple(tensor["shape"])
        whole = [v for v, pieces in views
                 if len(pieces) == 1 and tuple(pieces[0]["extent"]) == shape and not any(pieces[0]["start"])]
        if whole:  # stored whole in one file: its mapped view
            out[name] = whole[0]
            continue
        array = np.empty(shape, dtype=views[0][0].dtype)
        for view, pieces in views:
            for piece in pieces:
                row, start, extent = piece["row"], piece["start"], piece["extent"]
                target = tuple(slice(s, s + e) for s, e in zip(start, extent))
                array[target] = view[row:row + extent[0]]
        out[name] = array
    return out


def load_checkpoint(path, *, optimizer=False):
    """{name: array} of a checkpoint: `path` is a checkpoint directory (its `latest` step) or one
    of its step-* directories. The weights by parameter name, or with optimizer=True the AdamW
    moments ("m.<name>" and "v.<name>"). Tensors stored whole are read-only views of the mapped
    file (nothing is copied until written to or converted); tensors saved in blocks by several
    ranks are assembled; bf16 tensors, which NumPy has no type for, come widened to float32."""
    step_dir = _tidal.checkpoint_step_dir(os.fspath(path))
    is_moment = lambda name: name.startswith(("m.", "v."))  # noqa: E731
    metadata_file = os.path.join(step_dir, "metadata.json")
    if os.path.exists(metadata_file):
        with open(metadata_file) as f:
            metadata = json.load(f)
        return _assembled(step_dir, metadata, lambda name: is_moment(name) == optimizer)
    return _arrays(os.path.join(step_dir, "optimizer.safetensors" if optimizer else "model.safetensors"))
