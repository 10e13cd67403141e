"""Writes the same frames three ways with ASE itself, for mlip's readers of ASE's databases
(tests/test_io_ase_db.cpp): DIR/frames.xyz (ase.io.write, extended XYZ), DIR/frames.db (ase.db,
SQLite) and DIR/frames.aselmdb (ase_db_backends.aselmdb, the ASE-LMDB of fairchem's data sets),
plus DIR/nested.aselmdb (the same rows as plain nested lists, as fairchem-core's own writer
stores them) and DIR/corrupt.aselmdb (its second row is not zlib data).

    ase_db_write.py DIR ETHANOL_XYZ

The frames: the first 3 of ETHANOL_XYZ (a molecule, energies and forces) and 4 made here
(triclinic periodic cells with stress, one periodic along two axes, one without forces, one
with a weight key). The extended XYZ is written first and read back, and the databases are
written from what ASE read, so all three hold the same numbers. Exit code 77 (ctest: skipped)
when ase, lmdb or ase_db_backends cannot be imported.
"""
import os
import sys

try:
    import numpy as np
    import ase.db
    import ase.io
    import lmdb
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase_db_backends.aselmdb import LMDBDatabase
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

out, ethanol = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(7)
frames = ase.io.read(ethanol, index=":3")
for k in range(4):
    n = 5 + k
    cell = np.diag([7.0, 7.5, 8.0]) + rng.uniform(-0.8, 0.8, (3, 3)) * np.tri(3, k=-1)
    atoms = Atoms(numbers=rng.choice([1, 8, 26], n), positions=rng.uniform(0, 6, (n, 3)), cell=cell,
                  pbc=[True, True, k != 1])
    results = {"energy": float(rng.uniform(-50, -10))}
    if k != 2:
        results["forces"] = rng.normal(size=(n, 3))
    if k != 1:
        s = rng.normal(scale=0.01, size=(3, 3))
        results["stress"] = (s + s.T)[[0, 1, 2, 1, 0, 0], [0, 1, 2, 2, 2, 1]]  # Voigt xx yy zz yz xz xy
    atoms.calc = SinglePointCalculator(atoms, **results)
    if k == 3:
        atoms.info["weight"] = 2.5
    frames.append(atoms)

xyz = os.path.join(out, "frames.xyz")
ase.io.write(xyz, frames, format="extxyz")
frames = ase.io.read(xyz, index=":")
for path in ("frames.db", "frames.aselmdb"):
    full = os.path.join(out, path)
    db = ase.db.connect(full) if path.endswith(".db") else LMDBDatabase(full)
    for atoms in frames:
        kv = {"weight": atoms.info["weight"]} if "weight" in atoms.info else {}
        db.write(atoms, **kv)
    if not path.endswith(".db"):
        db.close()

# The same frames as plain nested lists, as fairchem-core's own LMDB writer (orjson) stores rows.
import json, zlib
env = lmdb.open(os.path.join(out, "nested.aselmdb"), subdir=False, lock=False, map_size=1 << 30)
with env.begin(write=True) as txn:
    for k, atoms in enumerate(frames):
        row = {"numbers": atoms.numbers.tolist(), "positions": atoms.positions.tolist(),
               "cell": atoms.cell.array.tolist(), "pbc": atoms.pbc.tolist(), "key_value_pairs": {}}
        results = atoms.calc.results if atoms.calc is not None else {}
        for key in ("energy", "forces", "stress"):
            if key in results:
                row[key] = np.asarray(results[key]).tolist()
        if "weight" in atoms.info:
            row["key_value_pairs"]["weight"] = atoms.info["weight"]
        txn.put(str(k + 1).encode(), zlib.compress(json.dumps(row).encode()))
    txn.put(b"nextid", zlib.compress(json.dumps(len(frames) + 1).encode()))
env.close()

corrupt = os.path.join(out, "corrupt.aselmdb")
db = LMDBDatabase(corrupt)
db.write(frames[0])
db.write(frames[1])
db.close()
env = lmdb.open(corrupt, subdir=False, lock=False)
with env.begin(write=True) as txn:
    txn.put(b"2", b"these bytes are not zlib data")
env.close()
print(f"wrote {len(frames)} frames into {out}/frames.xyz, frames.db, frames.aselmdb")
