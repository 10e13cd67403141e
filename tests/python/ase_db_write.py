"""Writes the same frames three ways with ASE itself, for mlip's readers of ASE's databases
(tests/test_io_ase_db.cpp): DIR/frames.xyz (ase.io.write, extended XYZ), DIR/frames.db (ase.db,
SQLite) and DIR/frames.aselmdb (ase_db_backends.aselmdb, the ASE-LMDB of fairchem's data sets),
plus DIR/nested.aselmdb (the same rows as plain nested lists, as fairchem-core's own writer
stores them) and DIR/corrupt.aselmdb (its second row is not zlib data); DIR/fairchem/, a folder
of two .aselmdb files with the metadata.npz of fairchem's make_lmdb_sizes.py; and DIR/npz/,
NumPy .npz files good and bad for mlip's reader of them.

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

# fairchem's layout: a folder of .aselmdb files and the metadata.npz that make_lmdb_sizes.py
# writes (natoms of every frame, int64, the files in Python's sorted order). The names make
# number order (data.2 before data.10) and name order differ, and the two files differ.
folder = os.path.join(out, "fairchem")
os.makedirs(folder)
parts = {"data.2.aselmdb": frames[:3], "data.10.aselmdb": frames[3:]}
for name, part in parts.items():
    db = LMDBDatabase(os.path.join(folder, name))
    for atoms in part:
        db.write(atoms, **({"weight": atoms.info["weight"]} if "weight" in atoms.info else {}))
    db.close()
natoms = np.array([len(atoms) for name in sorted(parts) for atoms in parts[name]], dtype=np.int64)
np.savez(os.path.join(folder, "metadata.npz"), natoms=natoms, neighbors=natoms * 12)

# .npz files for the reader: stored (np.savez) and deflated (np.savez_compressed), several
# integer types, large enough for several reads, and wrong in each way it checks.
npz = os.path.join(out, "npz")
os.makedirs(npz)
large = (np.arange(300000, dtype=np.int64) * 2654435761) % 2**32 % 1000   # little to deflate
np.savez(os.path.join(npz, "int64.npz"), other=np.zeros(3), natoms=np.array([3, 0, 7, 2**32 - 1], dtype=np.int64))
np.savez_compressed(os.path.join(npz, "uint16_deflated.npz"), natoms=np.array([5, 65535, 1], dtype=np.uint16))
np.savez(os.path.join(npz, "large.npz"), natoms=large.astype(np.int32))
np.savez_compressed(os.path.join(npz, "large_deflated.npz"), natoms=large.astype(np.int64))
np.savez(os.path.join(npz, "none.npz"), other=np.arange(3))
np.savez(os.path.join(npz, "two_d.npz"), natoms=np.ones((2, 3), dtype=np.int64))
np.savez(os.path.join(npz, "negative.npz"), natoms=np.array([4, -1], dtype=np.int32))
np.savez(os.path.join(npz, "too_large.npz"), natoms=np.array([4, 2**32], dtype=np.int64))
np.savez(os.path.join(npz, "floats.npz"), natoms=np.array([4.0, 5.0]))
np.savez(os.path.join(npz, "big_endian.npz"), natoms=np.array([4, 5], dtype=">i4"))
good = open(os.path.join(npz, "large.npz"), "rb").read()
at = good.index(b"\x93NUMPY") + 1000    # a byte of the array's data
open(os.path.join(npz, "damaged.npz"), "wb").write(good[:at] + bytes([good[at] ^ 1]) + good[at + 1:])
open(os.path.join(npz, "truncated.npz"), "wb").write(good[: len(good) // 2])
open(os.path.join(npz, "text.npz"), "w").write("not a zip archive at all")
print(f"wrote {len(frames)} frames into {out}/frames.xyz, frames.db, frames.aselmdb, and fairchem/, npz/")
