"""Neighbour lists from ASE for the structures in a JSON file, written back as JSON.

Usage: /usr/bin/python3 ase_neighbors.py IN.json OUT.json
IN: [{"positions": [[x,y,z],...], "cell": [[...],[...],[...]], "pbc": [b,b,b], "cutoff": c}, ...]
OUT: [{"i": [...], "j": [...], "S": [[a,b,c], ...]}, ...]
"""
import json
import sys

import numpy as np
from ase.neighborlist import primitive_neighbor_list


def main():
    with open(sys.argv[1]) as f:
        structures = json.load(f)
    out = []
    for s in structures:
        i, j, S = primitive_neighbor_list(
            "ijS", np.array(s["pbc"], dtype=bool), np.array(s["cell"], dtype=float),
            np.array(s["positions"], dtype=float), float(s["cutoff"]), self_interaction=False)
        out.append({"i": i.tolist(), "j": j.tolist(), "S": S.tolist()})
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
