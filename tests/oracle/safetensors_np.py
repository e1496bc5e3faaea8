"""Minimal safetensors reader/writer (no dependency on the `safetensors` package).

File layout:
    8 bytes   little-endian u64 N = length of the JSON header
    N bytes   JSON header: {name: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]},
                            "__metadata__": {str: str}}   (padded with spaces to a multiple of 8)
    ...       raw little-endian tensor data; offsets are relative to the start of this section

Supported dtypes: F32, F16, BF16, I32, I64, U8.

    load(path) -> (dict[str, torch.Tensor], dict[str, str])
    save(path, tensors, metadata=None)
"""

import json
import math
import struct
import sys

import torch

_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I32": torch.int32,
    "I64": torch.int64,
    "U8": torch.uint8,
}
_NAMES = {v: k for k, v in _DTYPES.items()}

if sys.byteorder != "little":  # pragma: no cover - every machine we run on is little-endian
    raise RuntimeError("safetensors_np assumes a little-endian host")


def load(path):
    """Read a safetensors file. Returns (tensors, metadata); tensors are writable CPU copies."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: file too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(raw)}")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]

    metadata = dict(header.pop("__metadata__", None) or {})
    tensors = {}
    for name, info in header.items():
        dtype_name = info["dtype"]
        if dtype_name not in _DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dtype_name}")
        dtype = _DTYPES[dtype_name]
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if end - begin != numel * itemsize or end > len(data) or begin < 0:
            raise ValueError(f"{path}: tensor {name!r} has inconsistent data_offsets {begin},{end}")
        if numel == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            buf = bytearray(data[begin:end])  # private, writable copy
            t = torch.frombuffer(buf, dtype=dtype).reshape(shape)
        tensors[name] = t
    return tensors, metadata


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save(path, tensors, metadata=None):
    """Write tensors (dict name -> torch.Tensor) and optional str->str metadata to `path`."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensor {name!r} is not a torch.Tensor")
        if t.dtype not in _NAMES:
            raise ValueError(f"tensor {name!r} has unsupported dtype {t.dtype}")
        b = _tensor_bytes(t)
        header[name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(b)],
        }
        chunks.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}

    hbytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((-len(hbytes)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in chunks:
            f.write(b)
