"""A folder of fairchem-style .aselmdb files for benchmarks/bench_atom_counts: FILES files of
FRAMES frames in all, random water-like frames of 48-141 atoms in a 12 A periodic box, energies
and forces (random: a measure of reading, not of accuracy), written by ase_db_backends' LMDB
database as fairchem's data sets are; with --metadata, also the metadata.npz of fairchem's
make_lmdb_sizes.py (natoms, the files in name order).

    make_aselmdb_set.py --out DIR [--frames 10000] [--files 4] [--seed 0] [--metadata]

Runs in the torch venv (ase, ase_db_backends).
"""
import argparse
import os

import numpy as np
from ase import Atoms
from ase.calculators.singlepoint import SinglePointCalculator
from ase_db_backends.aselmdb import LMDBDatabase

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--frames", type=int, default=10000)
p.add_argument("--files", type=int, default=4)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--metadata", action="store_true")
a = p.parse_args()
rng = np.random.default_rng(a.seed)
os.makedirs(a.out, exist_ok=True)
natoms = []
for f in range(a.files):
    db = LMDBDatabase(os.path.join(a.out, f"data.{f:04d}.aselmdb"))
    for _ in range(a.frames * (f + 1) // a.files - a.frames * f // a.files):
        n = 3 * int(rng.integers(16, 48))
        atoms = Atoms(numbers=[8, 1, 1] * (n // 3), positions=rng.uniform(0, 12, (n, 3)), cell=np.eye(3) * 12, pbc=True)
        atoms.calc = SinglePointCalculator(atoms, energy=float(-4.5 * n + rng.normal()), forces=rng.normal(size=(n, 3)))
        db.write(atoms)
        natoms.append(n)
    db.close()
if a.metadata:
    np.savez(os.path.join(a.out, "metadata.npz"), natoms=np.array(natoms, dtype=np.int64))
print(f"{a.out}: {len(natoms)} frames in {a.files} files" + (", metadata.npz" if a.metadata else ""))
