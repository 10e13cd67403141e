"""Loads an exported mlip model with Python's torch.jit.load and evaluates it.

Usage: PYTHON torch_load.py MODEL.pt INPUT.json OUTPUT.json [libmlip_ops.so]
(the library registers torch.ops.mlip, which se_e2_a models call)
INPUT: {"species": [...], "edge_index": [[...], [...]], "edge_vectors": [[x, y, z], ...], "n_centers": n}
OUTPUT: {"energies": [...], "metadata": {...}}
"""
import json
import sys

import torch


def main():
    if len(sys.argv) > 4:
        torch.ops.load_library(sys.argv[4])
    extra = {"mlip/metadata.json": ""}
    model = torch.jit.load(sys.argv[1], _extra_files=extra)
    with open(sys.argv[2]) as f:
        inp = json.load(f)
    meta = json.loads(extra["mlip/metadata.json"])
    dtype = torch.float32 if meta["dtype"] == "float32" else torch.float64
    energies = model(torch.tensor(inp["species"], dtype=torch.int64),
                     torch.tensor(inp["edge_index"], dtype=torch.int64),
                     torch.tensor(inp["edge_vectors"], dtype=dtype),
                     int(inp["n_centers"]))
    with open(sys.argv[3], "w") as f:
        json.dump({"energies": energies.double().tolist(), "metadata": meta}, f)


if __name__ == "__main__":
    main()
