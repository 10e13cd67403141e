"""Times ASE's neighbour list on the same liquid-water supercells as bench_neighbor_list.

Usage: /usr/bin/python3 ase_neighbor_timing.py SYSTEM_DIR CUTOFF REPS [REPS ...]
Builds frame 0 of the DeePMD system replicated REPS^3 times (same atom order as the C++
benchmark) and prints one JSON line per size: {"atoms", "edges", "seconds"} (best of 3 below
20k atoms, else one run).
"""
import json
import sys
import time

import numpy as np
from ase.neighborlist import primitive_neighbor_list


def supercell(system_dir, reps):
    coord = np.load(f"{system_dir}/set.000/coord.npy")[0].reshape(-1, 3).astype(float)
    box = np.load(f"{system_dir}/set.000/box.npy")[0].reshape(3, 3).astype(float)
    shifts = [(a, b, c) for a in range(reps) for b in range(reps) for c in range(reps)]
    pos = np.concatenate([coord + np.array(s) @ box for s in shifts])
    return pos, box * reps


def main():
    system_dir, cutoff = sys.argv[1], float(sys.argv[2])
    for reps in map(int, sys.argv[3:]):
        pos, cell = supercell(system_dir, reps)
        best = float("inf")
        for _ in range(3 if len(pos) < 20000 else 1):
            t0 = time.perf_counter()
            i, _j = primitive_neighbor_list("ij", [True] * 3, cell, pos, cutoff, self_interaction=False)
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"atoms": len(pos), "edges": int(len(i)), "seconds": best}), flush=True)


if __name__ == "__main__":
    main()
