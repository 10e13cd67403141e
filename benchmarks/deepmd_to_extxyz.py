#!/usr/bin/env python3
"""DeePMD npy folders (set.*/box, coord, energy, force; type.raw, type_map.raw) to one extended
XYZ file with REF_energy / REF_forces, the keys mace-torch reads (benchmarks/bench_mace.sh).

    python3 benchmarks/deepmd_to_extxyz.py OUT.xyz DIR [DIR...]
"""
import glob
import os
import sys

import numpy as np
from ase import Atoms
from ase.io import write


def frames(folder):
    names = open(os.path.join(folder, "type_map.raw")).read().split()
    types = np.loadtxt(os.path.join(folder, "type.raw"), dtype=int).reshape(-1)
    symbols = [names[t] for t in types]
    for s in sorted(glob.glob(os.path.join(folder, "set.*"))):
        box, coord = np.load(f"{s}/box.npy"), np.load(f"{s}/coord.npy")
        energy, force = np.load(f"{s}/energy.npy"), np.load(f"{s}/force.npy")
        for k in range(len(energy)):
            atoms = Atoms(symbols, positions=coord[k].reshape(-1, 3), cell=box[k].reshape(3, 3), pbc=True)
            atoms.info["REF_energy"] = float(energy[k])
            atoms.arrays["REF_forces"] = force[k].reshape(-1, 3)
            yield atoms


def main():
    out, folders = sys.argv[1], sys.argv[2:]
    all_frames = [f for d in folders for f in frames(d)]
    write(out, all_frames, format="extxyz")
    print(f"{out}: {len(all_frames)} frames")


if __name__ == "__main__":
    main()
