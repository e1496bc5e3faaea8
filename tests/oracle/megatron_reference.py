"""Megatron-Core's indexed datasets as the reference of tidal's (data/indexed_dataset.h), run under
the Hugging Face venv (scripts/oracle-venv.sh pins megatron-core there, without its dependencies).
Only megatron/core/datasets' own modules are loaded: the package's __init__ imports the rest of
Megatron, which needs a newer torch than Debian's, and indexed_dataset.py needs none of it.

    megatron_reference.py build PREFIX uint16|int32 SEED OUT   # IndexedDatasetBuilder writes PREFIX
    megatron_reference.py read PREFIX OUT                      # IndexedDataset reads PREFIX

Each writes OUT (safetensors) with what megatron's IndexedDataset reads: "tokens" (every sequence
back to back, int32), "lengths" (int32 a sequence), "document_indices" (int32)."""
import os
import sys
import types

import numpy as np
import torch
from safetensors.torch import save_file


def load_megatron():
    site = next(p for p in sys.path if os.path.isdir(os.path.join(p, "megatron", "core", "datasets")))
    for name in ("megatron", "megatron.core", "megatron.core.datasets"):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(site, *name.split("."))]
        sys.modules[name] = package
    from megatron.core.datasets import indexed_dataset
    return indexed_dataset


def dump(megatron, prefix, out):
    ds = megatron.IndexedDataset(prefix)
    tokens = [torch.from_numpy(ds[i].astype(np.int64)) for i in range(len(ds))]
    save_file({"tokens": torch.cat(tokens).to(torch.int32) if tokens else torch.zeros(0, dtype=torch.int32),
               "lengths": torch.from_numpy(np.array(ds.sequence_lengths, dtype=np.int32)),
               "document_indices": torch.from_numpy(np.array(ds.document_indices, dtype=np.int32))}, out)


def build(megatron, prefix, dtype, seed, out):
    rng = np.random.default_rng(seed)
    top = 65000 if dtype == "uint16" else 3_000_000
    builder = megatron.IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16 if dtype == "uint16" else np.int32)
    for _ in range(40):  # documents of one to three sequences
        for _ in range(int(rng.integers(1, 4))):
            builder.add_item(torch.from_numpy(rng.integers(0, top, size=int(rng.integers(1, 50))).astype(np.int64)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    dump(megatron, prefix, out)


def main(argv):
    megatron = load_megatron()
    if len(argv) == 5 and argv[0] == "build":
        build(megatron, argv[1], argv[2], int(argv[3]), argv[4])
    elif len(argv) == 3 and argv[0] == "read":
        dump(megatron, argv[1], argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
