"""Cross-checks mlip's extended XYZ reader and writer against ASE (run by tests/test_io.cpp).

    ase_roundtrip.py read FILE   read FILE with ase.io.read(index=':') and print what ASE sees
    ase_roundtrip.py emt FILE    label a few Cu crystals with ASE's EMT calculator, write them to
                                 FILE with ase.io.write, read them back with ASE and print them

The output is a JSON list with one object per frame: numbers, positions, cell (rows a, b, c), pbc,
energy, forces, stress (ASE's 3x3, eV/A^3, positive under tension), virial (the file's `virial`
as ASE parses it) and virial_from_stress = -stress * volume, which is mlip's virial (eV, positive
under compression). Missing values are null.

Run it with the Debian interpreter (/usr/bin/python3, package python3-ase).
"""
import json
import sys

import numpy as np
import ase.io


def matrix_or_none(value):
    return None if value is None else np.asarray(value, dtype=float).reshape(3, 3).tolist()


def frame_to_dict(atoms):
    results = atoms.calc.results if atoms.calc is not None else {}
    frame = {
        "numbers": atoms.numbers.tolist(),
        "positions": atoms.positions.tolist(),
        "cell": atoms.cell.array.tolist(),
        "pbc": [bool(p) for p in atoms.pbc],
        "energy": float(results["energy"]) if "energy" in results else None,
        "forces": np.asarray(results["forces"]).tolist() if "forces" in results else None,
        "stress": None,
        "virial": matrix_or_none(atoms.info.get("virial")),
        "virial_from_stress": None,
        "weight": float(atoms.info["weight"]) if "weight" in atoms.info else None,
    }
    if "stress" in results:
        stress = atoms.get_stress(voigt=False)  # full 3x3 from ASE's Voigt (xx yy zz yz xz xy)
        frame["stress"] = stress.tolist()
        # ASE's stress is (1/V) dE/d(strain), positive under tension; mlip's virial is
        # W = -dE/d(strain) = -stress * V.
        frame["virial_from_stress"] = (-stress * atoms.get_volume()).tolist()
    return frame


def emt_frames():
    """fcc Cu, compressed, sheared near equilibrium and expanded, in a non-orthogonal cell."""
    from ase.build import bulk
    from ase.calculators.emt import EMT

    frames = []
    for seed, (a, shear) in enumerate([(3.35, 0.0), (3.60, 0.03), (3.90, 0.0)]):
        atoms = bulk("Cu", "fcc", a=a) * (2, 2, 2)
        cell = atoms.cell.array.copy()
        cell[2] += shear * cell[0]
        atoms.set_cell(cell, scale_atoms=True)
        atoms.rattle(stdev=0.05, seed=seed)
        atoms.calc = EMT()
        atoms.get_potential_energy()
        atoms.get_forces()
        atoms.get_stress()
        frames.append(atoms)
    return frames


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "emt"):
        sys.exit(__doc__)
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "emt":
        ase.io.write(path, emt_frames(), format="extxyz")
    frames = ase.io.read(path, index=":", format="extxyz")
    json.dump([frame_to_dict(atoms) for atoms in frames], sys.stdout)


if __name__ == "__main__":
    main()
